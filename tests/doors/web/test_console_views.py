"""The console's pure parts, and docs/console.md kept true: every route the doc names is
served, every badge it quotes is one the console writes; times are RFC 3339 with Z for any
time zone; a plot's axis covers its values; an outcome says its status once."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from starlette.routing import Match

from bench_gate.api import create_app
from bench_gate.auth import Tokens
from bench_gate.config import default_config
from bench_gate.gateway import Gateway
from bench_gate.models import Event, EventType, Snapshot, Status, TakeoverRequest
from bench_gate.store import SqliteStore
from bench_gate.web import (
    WINDOW_S,
    Samples,
    create_console,
    deciders,
    outcome_words,
    span_of,
    ticks,
    trend,
    utc,
    waterfall,
)

ROOT = Path(__file__).resolve().parent.parent.parent.parent
DOC = (ROOT / "docs" / "console.md").read_text()
WEB = ROOT / "bench_gate" / "web"
RFC3339_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def _shape(path: str) -> str:
    """``/requests/{request_id}`` and ``/requests/{id}`` are one route."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def test_every_route_the_doc_names_is_served(tmp_path: Path) -> None:
    named = {(m, _shape(p)) for m, p in re.findall(r"`(GET|POST) (/[^`\s]*)`", DOC)}
    assert len(named) >= 15, named
    store = SqliteStore(tmp_path / "routes.db")
    gateway = Gateway(default_config(1, 2), store)  # never started: only its routes are read
    apps = (create_app(gateway, Tokens(store)), create_console(gateway, Tokens(store)))

    def served(method: str, path: str) -> bool:
        scope = {"type": "http", "method": method, "path": path.replace("{}", "x1"),
                 "root_path": "", "headers": [], "query_string": b""}
        return any(route.matches(scope)[0] is Match.FULL
                   for app in apps for route in app.routes)

    try:
        missing = {(m, p) for m, p in named if not served(m, p)}
        assert not served("GET", "/no-such-page") and not served("DELETE", "/login")
    finally:
        store.close()
    assert not missing, f"docs/console.md names routes the console does not serve: {missing}"


def test_every_badge_the_doc_quotes_is_one_the_console_writes() -> None:
    sources = "\n".join(p.read_text() for p in [*WEB.glob("*.py"), *WEB.glob("templates/*")])
    badges = set(re.findall(r"`([A-Z][A-Z ]{5,}[A-Z])(?::[^`]*)?`", DOC))
    assert {"TURNS OUTPUT ON", "OUTSIDE THE ENVELOPE", "STANDING PLAN"} <= badges, badges
    missing = {b for b in badges if b not in sources}
    assert not missing, f"docs/console.md quotes badges the console never writes: {missing}"


@given(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(9998, 1, 1)),
       st.integers(min_value=-14 * 60, max_value=14 * 60))
def test_every_time_is_rfc3339_in_utc_with_z(naive: datetime, minutes: int) -> None:
    at = naive.replace(tzinfo=timezone(timedelta(minutes=minutes)))
    text = utc(at)
    assert RFC3339_Z.match(text), text
    back = datetime.fromisoformat(text.replace("Z", "+00:00"))
    assert abs(back - at) < timedelta(milliseconds=1)
    assert utc(at.isoformat()) == text  # a stored ISO text says the same
    assert utc("not a time") == ""


@given(st.floats(-1e6, 1e6), st.floats(0, 1e6))
def test_a_plot_axis_covers_its_values(lo: float, span: float) -> None:
    marks = ticks(lo, lo + span)
    assert len(marks) == 3 and marks[0] < marks[1] < marks[2]
    assert marks[0] <= lo and marks[-1] >= lo + span


def test_a_trend_keeps_the_last_minutes_with_its_axes_and_unit() -> None:
    samples = Samples()
    for second in range(0, 600, 2):  # ten minutes, one sample every 2 s
        samples.add(1000.0 + second, {"1.measured_voltage": second / 100})
        samples.add(1000.5 + second, {"1.measured_voltage": -1.0})  # too soon: not kept
    series = samples.series("1.measured_voltage")
    now = 1000.0 + 598
    assert len(series) == WINDOW_S / 2 + 1 and series[0][0] >= now - WINDOW_S
    svg = trend(series, now, "measured voltage", "V")
    assert 'data-samples="151"' in svg and "minutes ago" in svg and "measured voltage (V)" in svg
    assert "−5" in svg and "over the last 5 minutes:" in svg
    assert "2.980 V" in svg and "5.980 V" in svg  # the value axis spans what is shown
    assert "no samples yet" in trend([], now, "measured voltage", "V")
    # Five minutes of samples span five minutes; a few seconds span the first minute.
    assert span_of(now - 299, now)[0] == WINDOW_S
    fresh = trend([(now - 20, 1.0), (now - 10, 1.5), (now - 2, 2.0)], now, "measured voltage",
                  "V")
    assert "seconds ago" in fresh and "−45" in fresh and "over the last 1 minute:" in fresh
    xs = [float(p.split(",")[0]) for p in re.findall(r'points="([^"]+)"', fresh)[0].split()]
    assert xs == sorted(xs) and xs[-1] - xs[0] > 20  # a line across the axis, not a dot


def _request(status: Status, outcome: str, notes: str | None = None,
             decided_by: str | None = None) -> TakeoverRequest:
    now = datetime.now(UTC)
    return TakeoverRequest(
        id="tk-1", run_id="run-1", instrument="psu", message="VOLT 5,(@1)", actions=[],
        required=[], status=status, reason="", timeout_minutes=5, expires_at=now,
        snapshot=Snapshot(idn="x", values={}, taken_at=now), proposal_hash="h",
        outcome=outcome, notes=notes, decided_by=decided_by)


def test_an_outcome_says_each_thing_once() -> None:
    denied = _request(Status.DENIED, "denied by olga: not on this DUT", "not on this DUT",
                      "olga")
    words = outcome_words(denied)
    assert words == "Denied by olga. Note to the requester: “not on this DUT”"
    assert deciders(denied) == "olga (denied)"
    # A request denied before decided_by was kept: the denier comes from its outcome.
    older = _request(Status.DENIED, "denied by pete: no", "no")
    assert outcome_words(older).startswith("Denied by pete.") and deciders(older) == \
        "pete (denied)"
    executed = _request(Status.EXECUTED, "executed: VOLT 5.0,(@1)")
    assert outcome_words(executed) == "VOLT 5.0,(@1)"
    assert deciders(executed) == "—"


def test_a_withdrawn_approval_is_the_gateways_act_and_names_whose_approval_and_why() -> None:
    """The journal's approval_withdrawn keeps the approver in ``by``; the timeline must not
    show the approver as having done it."""
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    rows = waterfall([Event(run_id="r", request_id="tk", type=EventType.APPROVAL_WITHDRAWN,
                            at=at, data={"kind": "output_enable", "by": "olga",
                                         "tokens": ["tok-1"],
                                         "reason": "the token it was given with was revoked"})],
                     "script-7")
    assert [(r.who, r.text) for r in rows] == [
        ("gateway", "output enable approval by olga: the token it was given with was revoked")]
