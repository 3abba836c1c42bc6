"""The instrument panel: live values with small plots of what was measured, and an
engineer's own change, which is filed as a held request like any other (never a write)."""

from __future__ import annotations

import time
from decimal import Decimal, InvalidOperation
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException

from ..errors import GatewayError, InstrumentError, Refused
from . import _views as views
from ._console import Console, checked_form, console_of, first, shown_error
from ._plots import Samples, trend

__all__ = ["router"]

router = APIRouter()
#: The colours of the plotted fields, in the profile's order.
COLOURS = ("#0a6", "#c60", "#1d5fbf", "#7b1fa2")


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
    samples = console.samples.setdefault(name, Samples())
    now = time.time()
    # The profile's measured numbers are what is plotted (instrument knowledge stays there).
    plotted = [f for f, spec in profile.fields.items()
               if spec.measured and spec.type == "number" and not spec.flags]
    point: dict[str, float] = {}
    for ch, values in state["channels"].items():
        for fld in plotted:
            try:
                point[f"{ch}.{fld}"] = float(Decimal(values.get(fld) or "nan"))
            except (ArithmeticError, InvalidOperation):
                continue
    if point:
        samples.add(now, point)
    plots: dict[str, list[str]] = {}
    for ch in state["channels"]:
        plots[ch] = [trend(samples.series(f"{ch}.{fld}"), now, profile.fields[fld].label,
                           profile.fields[fld].unit, COLOURS[i % len(COLOURS)])
                     for i, fld in enumerate(plotted)]
    limits = gateway.envelope(name)
    return {"name": name, "state": state, "error": error, "plots": plots,
            "profile": profile, "limits": limits, "lock": gateway.instrument_lock(name),
            "identity": gateway.instrument_identity(name),
            "over": {ch: views.over_envelope(profile, limits, ch, values)
                     for ch, values in state["channels"].items()},
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
