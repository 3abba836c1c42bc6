"""One request with its full handoff, and the decision on it: approve (with edits, against
the live state the page showed) or deny with a note."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ..auth import TOKEN_IN_TEXT, carries_token
from ..errors import GatewayError, NotFound
from ..handoff import cover_words, present_words
from ..journal import PLAN_OUTPUT, PLAN_SETPOINT
from ..models import ApprovalKind, Principal, Run, RunKind, RunStatus, Status, TakeoverRequest
from ..states import TERMINAL
from . import _views as views
from ._console import Console, checked_form, console_of, first, require_decider
from ._session import Session

__all__ = ["router"]

router = APIRouter()
_CHANGED = ("The request changed since this page was loaded (someone edited it). Nothing was "
            "{done}: read it again and decide.")


async def request_page(console: Console, request: Request, req: TakeoverRequest,
                       me: Principal, *, refusal: str | None = None,
                       changed: list[tuple[str, str, str]] | None = None,
                       status_code: int = 200) -> Response:
    gateway = console.gateway
    profile = gateway.profile_for(req)
    # Another bench's instrument is read (and rechecked) by that bench's gateway only.
    live = await console.live(req.instrument) if (
        req.status is Status.PENDING and gateway.owns(req)) else None
    shown_live = views.relevant(req, live) if live is not None else {}
    run = run_of(console, req.run_id)
    own = run is not None and run.principal == me.name
    self_blocked = own and (run is not None and (
        run.kind is not RunKind.ENGINEER or gateway.config.policy.independent_approver))
    if req.status is Status.PENDING and me.operates:
        gateway.note_shown(req, me, "viewed", shown_live, views.what_changes(req),
                           key=f"{req.id}/{me.name}/viewed/{req.proposal_hash[:16]}")
    return console.page(request, "request.html", {
        "req": req, "run": run, "h": req.handoff, "profile": profile,
        "rows": views.diff_rows(req, profile, live),
        "drifted": live is not None and shown_live != req.snapshot.values,
        "live_read": live is not None,
        "shown_live": json.dumps(shown_live, sort_keys=True),
        "edits": views.edit_fields(req, profile, gateway.envelope(req.instrument)),
        "missing": req.missing(), "valid": req.valid_approvals(), "own": own,
        "self_blocked": self_blocked, "kind_words": views.KIND_WORDS,
        "energize_channels": [a.channel for a in req.actions
                              if a.approval is ApprovalKind.OUTPUT_ENABLE],
        "setpoint_words": [*(a.words for a in req.actions
                             if a.approval is ApprovalKind.SETPOINT),
                           *present_words(profile, req.handoff.get("setpoint_needed"))],
        "cover": views.cover_rows(req, profile),
        # The words beside the output enable's box, as its approval's meaning keeps them.
        "cover_words": cover_words(profile, req.handoff.get("setpoint_cover")),
        # A plan's two halves are standing approvals of its scope (journal.approval_meaning).
        "plan_words": [a.words for a in req.actions if a.effect == "plan"],
        "plan_setpoint": PLAN_SETPOINT, "plan_output": PLAN_OUTPUT,
        "run_note": suspended(run) if req.status is Status.DENIED else None,
        "refusal": refusal, "changed": changed or [], "terminal": req.status in TERMINAL,
        "now": gateway.clock()}, status_code=status_code)


def shown_state(text: str) -> dict[str, str]:
    """The live state the page showed (its ``shown_live`` field), or {} when the form
    holds anything else (a list, a number, 100,000 brackets: each was a 500): {} differs
    from any live state read, so nothing is approved and the page is shown again."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return {}
    return value


def run_of(console: Console, run_id: str) -> Run | None:
    try:
        return console.gateway.get_run(run_id)
    except NotFound:
        return None


def suspended(run: Run | None) -> str | None:
    """``run suspended after 3 denials in a row``, while the run is suspended."""
    if run is None or run.status is not RunStatus.SUSPENDED:
        return None
    return f"run {run.takeover_reason or 'suspended'}"


@router.get("/requests/{request_id}", response_class=HTMLResponse)
async def one(request: Request, request_id: str) -> Response:
    console = console_of(request)
    _, me = console.who(request)
    return await request_page(console, request, console.request_for(me, request_id), me)


async def _decision(request: Request, request_id: str
                    ) -> tuple[Console, Session, Principal, dict[str, list[str]],
                               TakeoverRequest]:
    """A decision's checked form, by an operator or admin, on a request they may see."""
    console, session, me, form = await checked_form(request)
    require_decider(me, "deciding")
    return console, session, me, form, console.request_for(me, request_id)


@router.post("/requests/{request_id}/approve", response_class=HTMLResponse)
async def approve(request: Request, request_id: str) -> Response:
    console, session, me, form, req = await _decision(request, request_id)
    gateway = console.gateway
    if req.status is not Status.PENDING:
        console.say(session, "error", f"{req.id} is already {req.status.value}; nothing "
                                      "was approved")
        return RedirectResponse(f"/requests/{req.id}", status_code=303)
    kinds = [k for k in form.get("kind", []) if k in {x.value for x in ApprovalKind}]
    shown_hash = first(form, "shown_hash")
    if shown_hash != req.proposal_hash:
        return await request_page(console, request, req, me, status_code=409,
                                  refusal=_CHANGED.format(done="approved"))
    profile = gateway.profile_for(req)
    remote = not gateway.owns(req)
    live = {} if remote else await console.live(req.instrument)
    if live is None:
        return await request_page(console, request, req, me, status_code=502,
                                  refusal="The instrument cannot be read right now, so the "
                                          "live state cannot be checked. Nothing was "
                                          "approved.")
    shown = shown_state(first(form, "shown_live", "{}"))
    now_live = views.relevant(req, live)
    if not remote and now_live != shown:
        changed = [(views.label(profile, k), views.show(profile, k, shown.get(k)),
                    views.show(profile, k, now_live.get(k)))
                   for k in sorted(set(shown) | set(now_live))
                   if shown.get(k) != now_live.get(k)]
        gateway.note_shown(req, me, "refused_stale", now_live,
                           "approval refused: the live state changed since the page loaded")
        return await request_page(
            console, request, req, me, changed=changed, status_code=409,
            refusal="The instrument's live state changed since this page was loaded. "
                    "Nothing was approved. Here is the new state: decide again.")
    if not kinds:
        return await request_page(console, request, req, me, status_code=422,
                                  refusal="Tick what you approve: nothing is approved by "
                                          "default.")
    edits: dict[str, str] = {}
    for fld in views.edit_fields(req, profile, gateway.envelope(req.instrument)):
        raw = first(form, f"edit:{fld.key}", fld.value)
        value, error = views.check_edit(fld, raw)
        if error:
            return await request_page(console, request, req, me, status_code=422,
                                      refusal=f"Not approved: {error}.")
        if value is not None:
            edits[fld.key] = value
    notes = first(form, "notes").strip()
    if carries_token(notes):  # never stored, never shown back
        return await request_page(console, request, req, me, status_code=422,
                                  refusal=f"Not approved: the notes {TOKEN_IN_TEXT}.")
    try:
        # The core checks the hash again, in the same step that records the approval.
        result = await gateway.grant(req.id, me, kinds, notes, edits or None,
                                     proposal_hash=shown_hash)
    except GatewayError as exc:
        return await request_page(console, request, gateway.get_request(req.id), me,
                                  status_code=409, refusal=f"Not approved: {exc.message}")
    done = result.request
    gateway.note_shown(done, me, "approved", now_live,
                       f"approved {', '.join(kinds)}" + (f" with edits {edits}" if edits
                                                         else ""))
    if done.status is Status.PENDING:
        # The core's message says what was approved when it names it: say it once.
        given = "; ".join(views.KIND_WORDS[ApprovalKind(k)] for k in kinds)
        said = result.message if "approved" in result.message else (
            f"approved {given}; {result.message}")
        console.say(session, "info", said[:1].upper() + said[1:])
    elif done.status is Status.EXECUTED:
        # "Approved and executed: VOLT 5.0,(@1)": the outcome's own word, said once.
        console.say(session, "ok", f"Approved and {done.outcome or 'executed'}")
    elif done.status is Status.STALE and done.superseded_by:
        console.say(session, "error", f"{done.outcome} The fresh request is "
                                      f"{done.superseded_by}.")
        return RedirectResponse(f"/requests/{done.superseded_by}", status_code=303)
    else:
        console.say(session, "error", done.outcome or done.status.value)
    return RedirectResponse(f"/requests/{done.id}", status_code=303)


@router.post("/requests/{request_id}/deny", response_class=HTMLResponse)
async def deny(request: Request, request_id: str) -> Response:
    console, session, me, form, req = await _decision(request, request_id)
    gateway = console.gateway
    notes = first(form, "notes").strip()
    if not notes:
        return await request_page(console, request, req, me, status_code=422,
                                  refusal="A denial needs a note: it goes back to the "
                                          "requester.")
    if carries_token(notes):  # never stored, never shown back
        return await request_page(console, request, req, me, status_code=422,
                                  refusal=f"Not denied: the notes {TOKEN_IN_TEXT}.")
    shown_hash = first(form, "shown_hash")
    if req.status is Status.PENDING and shown_hash != req.proposal_hash:
        return await request_page(console, request, req, me, status_code=409,
                                  refusal=_CHANGED.format(done="denied"))
    try:
        done = await gateway.deny(req.id, me, notes, proposal_hash=shown_hash)
    except GatewayError as exc:
        return await request_page(console, request, gateway.get_request(req.id), me,
                                  status_code=409, refusal=f"Not denied: {exc.message}")
    gateway.note_shown(done, me, "denied", None, f"denied: {notes}")
    note = suspended(run_of(console, done.run_id))
    console.say(session, "ok", "Denied; the requester gets your note." + (
        f" {note[:1].upper()}{note[1:]}: it files nothing more until an operator releases "
        "it." if note else ""))
    return RedirectResponse(f"/requests/{done.id}", status_code=303)
