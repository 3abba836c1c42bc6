"""The panel's trend plots: inline SVG drawn by hand (no script, no CDN), with a time axis
over the last minutes, a value axis in the field's unit, and a label on each.

The time axis spans what was sampled, from one minute (in seconds) up to five (in minutes),
so a panel opened a few seconds ago already draws a line, not a dot at its right edge."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from html import escape

__all__ = ["MIN_SPAN_S", "WINDOW_S", "Samples", "span_of", "ticks", "trend"]

#: How far back a plot looks, in seconds: the last five minutes, and at least one.
WINDOW_S = 300.0
MIN_SPAN_S = 60.0
#: Samples closer together than this are one (the panel refreshes every 2 s per viewer).
MIN_STEP_S = 1.0
_W, _H = 320, 132
_LEFT, _RIGHT, _TOP, _BOTTOM = 52, 8, 16, 26


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # seconds (time.time())
    values: dict[str, float]  # "1.measured_voltage" -> 3.3


class Samples:
    """One instrument's recent measurements, kept for ``WINDOW_S``."""

    def __init__(self) -> None:
        self._points: deque[Sample] = deque()

    def add(self, at: float, values: dict[str, float]) -> None:
        if self._points and at - self._points[-1].at < MIN_STEP_S:
            return
        self._points.append(Sample(at, values))
        while self._points and self._points[0].at < at - WINDOW_S:
            self._points.popleft()

    def series(self, key: str) -> list[tuple[float, float]]:
        """(time, value) of ``key``, leaving out samples that had no number for it."""
        return [(p.at, p.values[key]) for p in self._points
                if key in p.values and math.isfinite(p.values[key])]


def ticks(lo: float, hi: float, count: int = 3) -> list[float]:
    """``count`` evenly spaced values from ``lo`` to ``hi``. A flat range is widened by half
    a unit each way (from 0 for a small positive value), so the trace sits inside."""
    if hi - lo <= 1e-9 * max(1.0, abs(lo), abs(hi)):
        lo, hi = (0.0 if 0 <= lo < 0.5 else lo - 0.5), hi + 0.5
    return [lo + (hi - lo) * i / (count - 1) for i in range(count - 1)] + [hi]


def span_of(oldest: float | None, now: float) -> tuple[float, list[tuple[float, str]], str]:
    """The time axis: its span in seconds, its ticks (seconds before now, words), its name.
    One minute in 15 s steps until more was sampled, then whole minutes up to five."""
    age = now - oldest if oldest is not None else 0.0
    if age <= MIN_SPAN_S:
        marks = [(s, "now" if s == 0 else f"−{s:.0f}") for s in (60.0, 45.0, 30.0, 15.0, 0.0)]
        return MIN_SPAN_S, marks, "seconds ago"
    minutes = min(math.ceil(age / 60), int(WINDOW_S // 60))
    marks = [(60.0 * m, "now" if m == 0 else f"−{m}") for m in range(minutes, -1, -1)]
    return 60.0 * minutes, marks, "minutes ago"


def trend(points: Iterable[tuple[float, float]], now: float, title: str, unit: str,
          color: str = "#0a6") -> str:
    """A line plot of the last minutes (at most ``WINDOW_S`` seconds): x is time before
    now, y the value in ``unit``, with tick labels on both axes and the title above."""
    pts = [(t, v) for t, v in points if now - WINDOW_S <= t <= now + 1]
    span, xmarks, xname = span_of(pts[0][0] if pts else None, now)
    name = escape(f"{title} ({unit})" if unit else title)
    head = (f'<svg class="plot" viewBox="0 0 {_W} {_H}" role="img" '
            f'data-samples="{len(pts)}" aria-label="{{label}}">'
            f'<text class="title" x="{_LEFT}" y="11">{name}</text>')
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    x0, y0 = _LEFT, _TOP + plot_h
    parts = [f'<line class="axis" x1="{x0}" y1="{_TOP}" x2="{x0}" y2="{y0}"/>',
             f'<line class="axis" x1="{x0}" y1="{y0}" x2="{x0 + plot_w}" y2="{y0}"/>']
    for before, words in xmarks:
        x = x0 + plot_w * (1 - before / span)
        parts.append(f'<line class="tick" x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y0 + 3}"/>'
                     f'<text x="{x:.1f}" y="{y0 + 13}" text-anchor="middle">{words}</text>')
    parts.append(f'<text class="xlabel" x="{x0 + plot_w / 2:.1f}" y="{_H - 2}" '
                 f'text-anchor="middle">{xname}</text>')
    if not pts:
        label = f"{title}: no samples yet"
        parts.append(f'<text x="{x0 + 6}" y="{_TOP + plot_h / 2:.1f}">no samples yet</text>')
        return head.replace("{label}", escape(label)) + "".join(parts) + "</svg>"
    values = [v for _, v in pts]
    marks = ticks(min(values), max(values))
    lo, hi = marks[0], marks[-1]
    for m in marks:
        y = y0 - (m - lo) / (hi - lo) * plot_h
        parts.append(f'<line class="grid" x1="{x0}" y1="{y:.1f}" x2="{x0 + plot_w}" '
                     f'y2="{y:.1f}"/><text x="{x0 - 3}" y="{y + 3:.1f}" '
                     f'text-anchor="end">{m:.3f} {escape(unit)}</text>')
    coords = " ".join(
        f"{x0 + min(1.0, max(0.0, 1 - (now - t) / span)) * plot_w:.1f},"
        f"{y0 - (v - lo) / (hi - lo) * plot_h:.1f}" for t, v in pts)
    last = coords.rsplit(" ", 1)[-1].split(",")
    parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.6" '
                 f'points="{coords}"/><circle cx="{last[0]}" cy="{last[1]}" r="2.5" '
                 f'fill="{color}"/>')
    count = f"{len(pts)} sample{'s' if len(pts) != 1 else ''}"
    label = (f"{title} over the last {span / 60:.0f} minute{'s' if span > 60 else ''}: "
             f"{count} from "
             f"{min(values):.3f} to {max(values):.3f} {unit}, now {values[-1]:.3f} {unit}")
    return head.replace("{label}", escape(label)) + "".join(parts) + "</svg>"
