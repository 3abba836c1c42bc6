"""Runs, SCPI submission and the per-run takeover endpoints."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import Field, TypeAdapter, ValidationError
from starlette.exceptions import HTTPException

from ..doorway import UNDECIDED, answer, follow
from ..doorway import submit as submit_message
from ..errors import shown_as_hash
from ..gateway import Gateway, RequestSort
from ..models import Event, Role, Status
from ..wire import wire
from ._auth import requires
from ._deps import (
    NO_BODY,
    PAGE_HEADERS,
    Caller,
    GatewayDep,
    Operator,
    own_request,
    own_run,
    page_headers,
    wait_seconds,
)
from ._problems import not_json
from ._schemas import (
    DenyBody,
    GrantBody,
    GrantOut,
    ProposalChangedOut,
    RunClose,
    RunCreate,
    RunOut,
    ScpiBody,
    ScpiOut,
    TakeoverAsk,
    TakeoverOut,
    run_out,
    takeover_out,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1/runs", tags=["runs"])
WaitQuery = Annotated[float | None, Query(ge=0, description="long-poll up to this many "
                                          "seconds (at most 60) for a decision")]


def _event(e: Event) -> dict[str, Any]:
    """An event in camelCase, its ``data`` verbatim: that is what its ``hash`` covers, so
    an auditor can recompute it from this very JSON."""
    dump = e.model_dump(mode="json")
    event: dict[str, Any] = wire({k: v for k, v in dump.items() if k != "data"})
    return {**event, "data": dump.get("data")}


_CALLER = requires(Role.REQUESTER)
_WAIT = TypeAdapter(Annotated[float, Field(ge=0)])
#: An empty key (``Idempotency-Key: $KEY`` with the variable unset) would make every write
#: sent so one request: refused.
_IDEMPOTENCY_KEY = TypeAdapter(Annotated[str, Field(min_length=1, max_length=200)])
#: What FastAPI would have documented for the parameters ``submit`` parses itself.
_SUBMIT_OPENAPI: dict[str, Any] = {
    "parameters": [
        {"name": "wait", "in": "query", "required": False,
         "description": "long-poll up to this many seconds (at most 60) for a decision",
         "schema": {"type": "number", "minimum": 0, "title": "Wait"}},
        {"name": "idempotency-key", "in": "header", "required": False,
         "schema": {"type": "string", "minLength": 1, "maxLength": 200,
                    "title": "Idempotency-Key"}},
    ],
    "requestBody": {"required": True, "content": {"application/json": {
        "schema": ScpiBody.model_json_schema(by_alias=True)}}},
}


def _validated(adapter: TypeAdapter[Any], value: Any, loc: tuple[str, ...],
               errors: list[Any], json: bool = False) -> Any:
    try:
        return adapter.validate_json(value) if json else adapter.validate_python(value)
    except ValidationError as exc:
        errors.extend({**e, "loc": (*loc, *e["loc"])} for e in exc.errors())
        return None


_SCPI_BODY = TypeAdapter(ScpiBody)


@router.post("/{run_id}/scpi", response_model=ScpiOut, openapi_extra=_SUBMIT_OPENAPI,
             responses={202: {"model": ScpiOut, "description": "the write is held"},
                        422: {"description": "refused: bad SCPI or outside the envelope"}})
async def submit(run_id: str, request: Request) -> Response:
    """A read runs at once (200); a write is held for a person (202), or refused (422)."""
    # The busiest route, so first in the router (the first FastAPI tries). It checks the
    # token first, then parses body, query and header itself: a third of the cost of
    # FastAPI's per-request dependency solving.
    who = await _CALLER(request)
    gw: Gateway = request.app.state.gateway
    media = not_json(request)
    if media is not None:  # as on every other route: a body declared as a form is no JSON
        return media
    errors: list[Any] = []
    raw = await request.body()
    if not raw:
        errors.append({"type": "missing", "loc": ("body",), "msg": "Field required",
                       "input": None})
        body = None
    else:
        body = _validated(_SCPI_BODY, raw, ("body",), errors, json=True)
    wait = request.query_params.get("wait")
    if wait is not None:
        wait = _validated(_WAIT, wait, ("query", "wait"), errors)
    idempotency_key = request.headers.get("idempotency-key")
    if idempotency_key is not None:
        idempotency_key = _validated(_IDEMPOTENCY_KEY, idempotency_key,
                                     ("header", "idempotency-key"), errors)
    if errors or body is None:
        raise RequestValidationError(errors)
    gw.owned_run(who, run_id, "submits commands to it")
    result = await submit_message(gw, run_id, body.instrument, body.command,
                                  rationale=body.rationale, confidence=body.confidence,
                                  step_id=body.step_id, idempotency_key=idempotency_key,
                                  timeout_minutes=body.timeout_minutes)
    req = result.request
    if req is None:  # a read: no model to build and validate again
        return JSONResponse({"status": result.status, "response": result.response,
                             "takeover": None, "reason": None})
    seconds = wait_seconds(wait)
    if seconds:
        req = await follow(gw, req, seconds)
    out = ScpiOut(status=req.status.value, response=answer(req),
                  takeover=takeover_out(req, handoff=True), reason=req.outcome)
    return JSONResponse(out.model_dump(mode="json", by_alias=True),
                        status_code=202 if req.status in UNDECIDED else 200)


@router.post("", status_code=201, response_model=RunOut)
async def create_run(body: RunCreate, who: Caller, gw: GatewayDep) -> RunOut:
    """A run; with ``heartbeatSeconds`` it closes when its client goes silent that long."""
    return run_out(gw.create_run(who, body.kind, body.goal,
                                 heartbeat_seconds=body.heartbeat_seconds))


@router.get("", response_model=list[RunOut])
def list_runs(who: Caller, gw: GatewayDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100,
              offset: Annotated[int, Query(ge=0, le=2**62)] = 0) -> list[RunOut]:
    """Newest first. A requester sees its own runs only, filtered before paging."""
    return [run_out(r) for r in gw.list_runs(who, limit, offset)]


@router.get("/{run_id}", response_model=RunOut)
def get_run(run_id: str, who: Caller, gw: GatewayDep) -> RunOut:
    return run_out(own_run(gw, run_id, who))


@router.get("/{run_id}/journal")
def journal(run_id: str, who: Caller, gw: GatewayDep,
            after: Annotated[int, Query(ge=0, le=2**62, description="events after this seq")] = 0,
            limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict[str, Any]:
    """The run's journal, oldest first; pass ``next`` as ``after`` for the next page."""
    own_run(gw, run_id, who)
    events = gw.journal(run_id, after=after, limit=limit)
    return {"events": [_event(e) for e in events],
            "next": events[-1].seq if len(events) == limit else None}


@router.post("/{run_id}/takeover/request", response_model=RunOut)
async def take_over(run_id: str, body: TakeoverAsk, who: Operator, gw: GatewayDep) -> RunOut:
    """An operator takes the run over: every later write of it is held until release."""
    reason = body.reason + (f" (step {body.step_id})" if body.step_id else "")
    return run_out(gw.take_over(run_id, who, reason))


@router.post("/{run_id}/release", response_model=RunOut, dependencies=NO_BODY)
async def release(run_id: str, who: Operator, gw: GatewayDep) -> RunOut:
    """End a takeover or a suspension. A suspension is for another person than the run's
    requester to end (403 otherwise), and so is a takeover another operator holds."""
    return run_out(gw.release(run_id, who))


@router.post("/{run_id}/close", response_model=RunOut)
async def close(run_id: str, who: Caller, gw: GatewayDep, body: RunClose | None = None
                ) -> RunOut:
    """The run is done: its undecided requests are cancelled (nothing is written), and it
    no longer counts against its requester's ``limits.open_runs``."""
    own_run(gw, run_id, who)
    reason = body.reason if body is not None and body.reason else None
    gw.close_run(run_id, f"the run was closed by {who.name}"
                 + (f": {reason}" if reason else ""))
    return run_out(gw.get_run(run_id))


@router.get("/{run_id}/takeover", response_model=list[TakeoverOut], responses=PAGE_HEADERS)
def run_requests(run_id: str, who: Caller, gw: GatewayDep, request: Request,
                 response: Response, status: Status | None = None,
                 limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                 offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
                 sort: Annotated[RequestSort, Query(description=(
                     "newest (the default) or expiry: expiring soonest, first"))
                 ] = RequestSort.NEWEST) -> list[TakeoverOut]:
    """The run's requests, one page at a time; ``X-Total-Count`` says how many match."""
    own_run(gw, run_id, who)
    page = gw.list_requests(status, run_id, None, limit, offset, sort)
    page_headers(response, request, page)
    return [takeover_out(r) for r in page]


IfMatch = Annotated[str | None, Header(max_length=200, description=(
    "the proposal hash as an ETag (`\"<proposalHash>\"`, quotes optional), instead of "
    "proposalHash in the body"))]
#: A decision names the proposal its approver was shown (DESIGN rule 7).
_DECISION_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"description": "proposalHash and If-Match name different proposals, or If-Match "
                         "is not one strong ETag"},
    409: {"model": ProposalChangedOut,
          "description": "the proposal named is not the current one (someone edited it, or "
                         "it was re-proposed): nothing was recorded; the body carries the "
                         "current proposal to show before deciding again. Also a request "
                         "that is no longer pending"},
    428: {"description": "no proposal named: send proposalHash (or If-Match)"},
}


def _clip(named: str) -> str:
    return named[:12] if shown_as_hash(named) else "(not a proposal hash)"


def _shown_hash(tk_id: str, body_hash: str | None, if_match: str | None) -> str:
    """The proposal hash a decision names: ``proposalHash`` in the body or an ``If-Match``
    ETag (both may be given if they agree)."""
    header = None
    if if_match is not None:
        tag = if_match.strip()
        if tag == "*":
            raise HTTPException(428, "If-Match: * names no proposal; send the request's "
                                     f"proposalHash (GET /v1/takeover/{tk_id} gives it, "
                                     "and its ETag)")
        if tag.startswith("W/"):
            raise HTTPException(400, "If-Match: a weak ETag cannot name a proposal; send "
                                     f"the ETag of GET /v1/takeover/{tk_id} as it is")
        if len(tag) >= 2 and tag[0] == tag[-1] == '"':
            tag = tag[1:-1]
        if not tag or '"' in tag or "," in tag:
            raise HTTPException(400, "If-Match must name exactly one proposal: the ETag "
                                     f"of GET /v1/takeover/{tk_id}")
        header = tag
    if body_hash is not None and header is not None and body_hash != header:
        # Each shown only if it is a hash: a token pasted there is never echoed, even clipped.
        raise HTTPException(400, f"proposalHash {_clip(body_hash)} and If-Match "
                                 f"{_clip(header)} name different proposals; send one, the "
                                 "one you showed")
    named = body_hash if body_hash is not None else header
    if named is None:
        raise HTTPException(428, "name the proposal you decide on: send proposalHash in the "
                                 "JSON body (or an If-Match header), the proposalHash that "
                                 f"GET /v1/takeover/{tk_id} returned when you showed it "
                                 "(also its ETag)")
    return named


@router.post("/{run_id}/takeover/{tk_id}/grant", response_model=GrantOut,
             responses=_DECISION_RESPONSES)
async def grant(run_id: str, tk_id: str, body: GrantBody, who: Operator,
                gw: GatewayDep, if_match: IfMatch = None) -> GrantOut:
    """Give approvals of exactly the proposal named (``proposalHash`` or ``If-Match``: the
    one its approver was shown); when none is missing the write runs (recheck, write, read
    back)."""
    own_request(gw, tk_id, who, run_id)
    seen = _shown_hash(tk_id, body.proposal_hash, if_match)
    result = await gw.grant(tk_id, who, list(body.approve), body.notes, body.edits,
                            proposal_hash=seen)
    return GrantOut(request=takeover_out(result.request, handoff=True),
                    missing=result.missing, message=result.message)


@router.post("/{run_id}/takeover/{tk_id}/deny", response_model=TakeoverOut,
             responses=_DECISION_RESPONSES)
async def deny(run_id: str, tk_id: str, body: DenyBody, who: Operator,
               gw: GatewayDep, if_match: IfMatch = None) -> TakeoverOut:
    """Deny exactly the proposal named (``proposalHash`` or ``If-Match``); the notes go back
    to the requester."""
    own_request(gw, tk_id, who, run_id)
    seen = _shown_hash(tk_id, body.proposal_hash, if_match)
    return takeover_out(await gw.deny(tk_id, who, body.notes, proposal_hash=seen))


@router.post("/{run_id}/takeover/{tk_id}/release", response_model=RunOut,
             dependencies=NO_BODY)
async def release_request(run_id: str, tk_id: str, who: Operator, gw: GatewayDep) -> RunOut:
    """The run resumes (the request only names which takeover is being ended)."""
    own_request(gw, tk_id, who, run_id)
    return run_out(gw.release(run_id, who))
