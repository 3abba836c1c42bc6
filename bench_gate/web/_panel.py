"""The instrument panel: live values with small plots of what was measured, and an
engineer's own change, which is filed as a held request like any other (never a write)."""

from __future__ import annotations

import time
from collections import deque
from decimal import Decimal
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException

from ..errors import GatewayError, InstrumentError, Refused
from . import _views as views
from ._console import Console, checked_form, console_of, first, shown_error

__all__ = ["router"]

router = APIRouter()
HISTORY_POINTS = 120


@router.get("/instruments", response_class=HTMLResponse)
async def instruments(request: Request) -> Response:
    console = console_of(request)
    console.who(request)
    names = [i.name for i in console.gateway.config.instruments]
    if not names:
        raise HTTPException(404, "this bench has no instruments")
    return RedirectResponse(f"/instruments/{names[0]}", status_code=303)


async def _panel_context(console: Console, name: str) -> dict[str, Any]:
    gateway = console.gateway
    profile = shown_error(gateway.profile, name)
    error = None
    try:
        state = await gateway.live_state(name)
    except InstrumentError as exc:
        state, error = {"channels": {}, "idn": "?", "at": None}, exc.message
    samples = console.samples.setdefault(name, deque(maxlen=HISTORY_POINTS))
    point: dict[str, tuple[float, float]] = {}
    for ch, values in state["channels"].items():
        try:
            point[ch] = (float(Decimal(values.get("measured_voltage") or "nan")),
                         float(Decimal(values.get("measured_current") or "nan")))
        except ArithmeticError:
            continue
    if point:
        samples.append((time.time(), point))
    plots: dict[str, tuple[str, str]] = {}
    for ch in state["channels"]:
        volts = [p[ch][0] for _, p in samples if ch in p and p[ch][0] == p[ch][0]]
        amps = [p[ch][1] for _, p in samples if ch in p and p[ch][1] == p[ch][1]]
        plots[ch] = (views.sparkline(volts), views.sparkline(amps, color="#c60"))
    limits = gateway.envelope(name)
    return {"name": name, "state": state, "error": error, "plots": plots,
            "profile": profile, "limits": limits,
            "ranges": {str(ch): {f: views.limits_of(profile, limits, ch, f)
                                 for f in ("voltage", "current")}
                       for ch in profile.channels}}


@router.get("/instruments/{name}", response_class=HTMLResponse)
async def panel(request: Request, name: str) -> Response:
    console = console_of(request)
    console.who(request)
    return console.page(request, "panel.html", await _panel_context(console, name))


@router.get("/fragments/instruments/{name}", response_class=HTMLResponse)
async def panel_fragment(request: Request, name: str) -> Response:
    console = console_of(request)
    console.who(request)
    return console.page(request, "_panel.html", await _panel_context(console, name))


@router.post("/instruments/{name}/change", response_class=HTMLResponse)
async def change(request: Request, name: str) -> Response:
    """An engineer's own change: a held request of their engineer run, never a write."""
    console, session, me, form = await checked_form(request)
    gateway = console.gateway
    try:
        profile = gateway.profile(name)
        channel = int(first(form, "channel"))
    except (GatewayError, ValueError) as exc:
        raise HTTPException(404, "no such instrument or channel") from exc
    if channel not in profile.channels:
        raise HTTPException(404, f"{name} has no channel {channel}")
    back = RedirectResponse(f"/instruments/{name}", status_code=303)
    limits = gateway.envelope(name)
    setpoints: dict[str, str] = {}
    for fld in ("voltage", "current"):
        raw = first(form, fld).strip()
        if not raw:
            continue
        low, high, note = views.limits_of(profile, limits, channel, fld)
        check = views.EditField(key=f"CH{channel}.{fld}", label=f"CH{channel} {fld}",
                                value="", unit="", low=low, high=high, limit_note=note)
        _, error = views.check_edit(check, raw)
        if error:
            console.say(session, "error", f"Not submitted: {error}.")
            return back
        setpoints[fld] = raw
    output = {"ON": True, "OFF": False}.get(first(form, "output"))
    if not setpoints and output is None:
        console.say(session, "error", "Nothing to change: fill in a value first.")
        return back
    reason = first(form, "rationale").strip() or None
    try:
        # An engineer run is an operator's: a requester's change is refused here.
        result = await gateway.panel_change(me, name, channel, setpoints, output, reason)
    except Refused as exc:
        console.say(session, "error", f"Refused: {exc.message}")
        return back
    except GatewayError as exc:
        console.say(session, "error", f"Not submitted: {exc.message}")
        return back
    if result.request is None:
        console.say(session, "ok", f"Your change ran at once: {result.status}")
        return back
    console.say(session, "info", "Your change is held like any other: confirm it below "
                                 "as a second step (setpoint and output enable "
                                 "separately).")
    return RedirectResponse(f"/requests/{result.request.id}", status_code=303)
