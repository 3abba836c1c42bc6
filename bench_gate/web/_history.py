"""A run's timeline (its journal as a waterfall, with what each reviewer was shown) and
the decided history, filtered by instrument, outcome, approver or run."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from ..models import Event, Status
from ..states import TERMINAL
from . import _views as views
from ._console import console_of, shown_error

__all__ = ["router"]

router = APIRouter()
JOURNAL_PAGE = 1000


@router.get("/runs/{run_id}", response_class=HTMLResponse)
async def timeline(request: Request, run_id: str) -> Response:
    console = console_of(request)
    gateway = console.gateway
    _, me = console.who(request)
    run = shown_error(gateway.visible_run, me, run_id)
    events: list[Event] = []
    after = 0
    while True:
        page = gateway.journal(run_id, after=after, limit=JOURNAL_PAGE)
        events.extend(page)
        if len(page) < JOURNAL_PAGE:
            break
        after = page[-1].seq
    return console.page(request, "timeline.html", {
        "run": run, "rows": views.waterfall(events, run.principal, gateway.shown(run_id))})


@router.get("/history", response_class=HTMLResponse)
async def history(request: Request, instrument: str = "", outcome: str = "",
                  approver: str = "", run: str = "") -> Response:
    console = console_of(request)
    gateway = console.gateway
    _, me = console.who(request)
    try:
        status = Status(outcome) if outcome else None
    except ValueError:
        status = None
    decided = [r for r in gateway.list_requests(status, run or None, instrument or None,
                                                limit=1000)
               if r.status in TERMINAL and gateway.may_see(me, r.run_id)]
    if approver:  # whoever decided: an approver, or who denied or cancelled it
        who = approver.lower()
        decided = [r for r in decided
                   if any(who in name.lower() for name in views.decider_names(r))]
    decided.sort(key=lambda r: r.decided_at or r.created_at, reverse=True)
    return console.page(request, "history.html", {
        "decided": decided[:300], "f": {"instrument": instrument, "outcome": outcome,
                                        "approver": approver, "run": run},
        "outcomes": sorted(s.value for s in TERMINAL)})
