"""Instruments, live state, the event stream, health, metrics, and admin endpoints."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, StreamingResponse
from pydantic import BaseModel, Field
from starlette.types import Receive, Scope, Send

from ..auth import Tokens
from ..models import Principal, Role, Status
from ..quotas import Lease, Quota, lease
from ._auth import can_operate
from ._deps import Admin, Caller, GatewayDep
from ._schemas import InstrumentOut

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
    for name, inst in gw.instruments.items():
        door = doors.get(name)
        out.append(InstrumentOut(name=name, profile=inst.config.profile,
                                 resource=inst.config.resource,
                                 door_host=door[0] if door else None,
                                 door_port=door[1] if door else None))
    return out


@router.get("/v1/instruments/{name}/state", tags=["bench"])
async def state(name: str, who: Caller, gw: GatewayDep) -> dict[str, Any]:
    """Every field of every channel, read live from the instrument."""
    return await gw.live_state(name)


def _visible(gw: GatewayDep, who: Principal, message: dict[str, Any]) -> bool:
    if can_operate(who):
        return True
    # Requests, plans and questions name their run; a run event is the run itself.
    run_id = message.get("id") if message.get("type") == "run" else message.get("run_id")
    run = gw.store.get_run(str(run_id)) if run_id else None
    return run is not None and run.principal == who.name


class _LeasedStream(StreamingResponse):
    """An event stream that gives its quota lease back, and stops watching its token,
    however it ends."""

    def __init__(self, content: AsyncIterator[str], held: Lease,
                 unwatch: Callable[[], None], **kw: Any) -> None:
        super().__init__(content, **kw)
        self.held = held
        self.unwatch = unwatch

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.held.release()
            self.unwatch()


@router.get("/v1/events", tags=["bench"],
            responses={200: {"content": {"text/event-stream": {}},
                             "description": "Server-Sent Events"},
                       429: {"description": "the requester has limits.sse_streams streams "
                                            "open already"}})
async def events(who: Caller, gw: GatewayDep, request: Request) -> StreamingResponse:
    """Request and run changes as Server-Sent Events (a requester sees its own runs; it may
    hold ``limits.sse_streams`` of them open at once). The stream ends when its token is
    revoked."""
    stopping: asyncio.Event = request.app.state.stopping
    held = lease(gw, who, Quota.SSE_STREAMS)
    tokens: Tokens = request.app.state.tokens
    revoked = asyncio.Event()
    unwatch = tokens.watch(request.headers["authorization"].partition(" ")[2].strip(),
                           revoked.set)

    async def stream() -> AsyncIterator[str]:
        async with gw.subscribe() as queue:
            yield ": connected\n\n"
            while not stopping.is_set() and not revoked.is_set():
                try:
                    message = await asyncio.wait_for(queue.get(), timeout=1.0)
                except TimeoutError:
                    if await request.is_disconnected():
                        return
                    continue
                if _visible(gw, who, message):
                    yield f"event: {message['type']}\ndata: {json.dumps(message)}\n\n"

    return _LeasedStream(stream(), held, unwatch, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache"})


@router.get("/metrics", response_class=PlainTextResponse, tags=["bench"])
def metrics(who: Caller, gw: GatewayDep) -> str:
    """Prometheus text exposition."""
    pending = gw.store.page_requests(Status.PENDING, limit=1).total
    lines = [
        "# HELP bench_gate_pending_requests Takeover requests waiting for a decision.",
        "# TYPE bench_gate_pending_requests gauge",
        f"bench_gate_pending_requests {pending}",
        "# HELP bench_gate_decisions_total Requests decided (granted in full or denied).",
        "# TYPE bench_gate_decisions_total counter",
        f"bench_gate_decisions_total {gw.metrics['decisions']:g}",
        "# HELP bench_gate_decision_seconds Time from request to decision.",
        "# TYPE bench_gate_decision_seconds summary",
        f"bench_gate_decision_seconds_sum {gw.metrics['decision_seconds']:.6f}",
        f"bench_gate_decision_seconds_count {gw.metrics['decisions']:g}",
        "# HELP bench_gate_io_errors_total Failed I/O with an instrument.",
        "# TYPE bench_gate_io_errors_total counter",
    ]
    for name, inst in gw.instruments.items():
        lines.append(f'bench_gate_io_errors_total{{instrument="{name}"}} {inst.lane.io_errors}')
    return "\n".join(lines) + "\n"


class TokenCreate(BaseModel):
    name: str = Field(min_length=1, max_length=64)
    role: Role


@router.get("/v1/tokens", tags=["admin"])
def list_tokens(who: Admin, request: Request) -> list[dict[str, Any]]:
    tokens: Tokens = request.app.state.tokens
    return tokens.all()


@router.post("/v1/tokens", status_code=201, tags=["admin"])
def create_token(body: TokenCreate, who: Admin, request: Request) -> dict[str, Any]:
    """A new token; its secret is shown only in this response."""
    tokens: Tokens = request.app.state.tokens
    record, secret = tokens.create(body.name, body.role)
    return {**record, "token": secret}


@router.delete("/v1/tokens/{id_or_name}", tags=["admin"])
def revoke_token(id_or_name: str, who: Admin, request: Request) -> dict[str, int]:
    tokens: Tokens = request.app.state.tokens
    return {"revoked": tokens.revoke(id_or_name)}


@router.get("/v1/config", tags=["admin"])
def config(who: Admin, gw: GatewayDep) -> dict[str, Any]:
    return gw.config.model_dump(mode="json")
