"""Instruments, live state, the event stream, health, metrics, and admin endpoints."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, StreamingResponse
from pydantic import Field

from ..auth import Tokens
from ..models import Role
from ..streams import event_stream
from ..wire import wire
from ._deps import NO_BODY, Admin, Caller, GatewayDep
from ._schemas import LAX, InstrumentOut, _Camel

__all__ = ["router"]

router = APIRouter()
HEARTBEAT_SECONDS = 15.0


@router.get("/healthz", tags=["bench"])
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/v1/instruments", response_model=list[InstrumentOut], tags=["bench"])
def instruments(who: Caller, gw: GatewayDep, request: Request) -> list[InstrumentOut]:
    doors: dict[str, tuple[str, int]] = request.app.state.doors_info
    out = []
    for ic in gw.config.instruments:
        door = doors.get(ic.name)
        lock = gw.instrument_lock(ic.name)
        known = gw.instrument_identity(ic.name)
        out.append(InstrumentOut(name=ic.name, profile=ic.profile, resource=ic.resource,
                                 door_host=door[0] if door else None,
                                 door_port=door[1] if door else None,
                                 lock=lock.words, locked=lock.locked, lock_owner=lock.owner,
                                 lock_warning=lock.warning, identity=known["expected"],
                                 idn=known["answered"], wrong_instrument=known["words"],
                                 profile_name=known["profile"],
                                 unreachable=None if known["words"] else known["failing"]))
    return out


@router.get("/v1/instruments/{name}/state", tags=["bench"])
async def state(name: str, who: Caller, gw: GatewayDep) -> dict[str, Any]:
    """Every field of every channel, read live from the instrument."""
    state: dict[str, Any] = wire(await gw.live_state(name))
    return state


@router.get("/v1/events", tags=["bench"],
            responses={200: {"content": {"text/event-stream": {}},
                             "description": "Server-Sent Events"},
                       429: {"description": "the requester has limits.sse_streams streams "
                                            "open already"}})
async def events(who: Caller, gw: GatewayDep, request: Request) -> StreamingResponse:
    """Request and run changes as Server-Sent Events (a requester sees its own runs; it may
    hold ``limits.sse_streams`` of them open at once). The stream ends when its token is
    revoked."""
    return event_stream(gw, who, request.app.state.tokens,
                        request.headers["authorization"].partition(" ")[2].strip(),
                        stopping=request.app.state.stopping,
                        disconnected=request.is_disconnected)


@router.get("/metrics", response_class=PlainTextResponse, tags=["bench"])
def metrics(who: Caller, gw: GatewayDep) -> str:
    """Prometheus text exposition."""
    figures = gw.figures()
    lines = [
        "# HELP bench_gate_pending_requests Takeover requests waiting for a decision.",
        "# TYPE bench_gate_pending_requests gauge",
        f"bench_gate_pending_requests {figures.pending}",
        "# HELP bench_gate_decisions_total Requests decided (granted in full or denied).",
        "# TYPE bench_gate_decisions_total counter",
        f"bench_gate_decisions_total {figures.decisions:g}",
        "# HELP bench_gate_decision_seconds Time from request to decision.",
        "# TYPE bench_gate_decision_seconds summary",
        f"bench_gate_decision_seconds_sum {figures.decision_seconds:.6f}",
        f"bench_gate_decision_seconds_count {figures.decisions:g}",
        "# HELP bench_gate_io_errors_total Failed I/O with an instrument.",
        "# TYPE bench_gate_io_errors_total counter",
    ]
    for name, errors in figures.io_errors.items():
        lines.append(f'bench_gate_io_errors_total{{instrument="{name}"}} {errors}')
    return "\n".join(lines) + "\n"


class TokenCreate(_Camel):
    """Only a name and a role: any other key (an expiry, a scope) is refused, never a token
    made without what was asked."""

    name: str = Field(min_length=1, max_length=64)
    role: Annotated[Role, LAX]


@router.get("/v1/tokens", tags=["admin"])
def list_tokens(who: Admin, request: Request) -> list[dict[str, Any]]:
    tokens: Tokens = request.app.state.tokens
    return [wire(t) for t in tokens.all()]


@router.post("/v1/tokens", status_code=201, tags=["admin"])
def create_token(body: TokenCreate, who: Admin, request: Request) -> dict[str, Any]:
    """A new token; its secret is shown only in this response."""
    tokens: Tokens = request.app.state.tokens
    record, secret = tokens.create(body.name, body.role, by=who)
    return {**wire(record), "token": secret}


@router.delete("/v1/tokens/{id_or_name}", tags=["admin"], dependencies=NO_BODY)
def revoke_token(id_or_name: str, who: Admin, request: Request) -> dict[str, int]:
    tokens: Tokens = request.app.state.tokens
    return {"revoked": tokens.revoke(id_or_name)}


@router.get("/v1/config", tags=["admin"])
def config(who: Admin, gw: GatewayDep) -> dict[str, Any]:
    """The configuration in force, spelled as bench.toml spells it (``keep_days``,
    ``socket_port``): the one body not in camelCase, so that it reads back into the file."""
    return gw.config.model_dump(mode="json")
