"""The live event stream the HTTP API and the console serve (Server-Sent Events): one loop
over the gateway's changes, filtered by who may see each, counted against the requester's
``limits.sse_streams``, ended when its token is revoked, and given back however it ends.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from .auth import Tokens
from .models import Principal
from .quotas import Lease, Quota, lease
from .wire import wire

if TYPE_CHECKING:
    from .gateway import Gateway

__all__ = ["LeasedStream", "event_stream"]

#: How often the loop looks whether its client is still there.
POLL_SECONDS = 1.0


class LeasedStream(StreamingResponse):
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


async def _events(gateway: Gateway, who: Principal, stopping: asyncio.Event,
                  revoked: asyncio.Event, disconnected: Callable[[], Awaitable[bool]],
                  hello: str, tick: str | None) -> AsyncIterator[str]:
    async with gateway.subscribe() as queue:
        yield hello
        while not stopping.is_set() and not revoked.is_set():
            try:
                message = await asyncio.wait_for(queue.get(), timeout=POLL_SECONDS)
            except TimeoutError:
                if await disconnected():
                    return
                if tick is not None:
                    yield tick
                continue
            # Requests, plans and questions name their run; a run event is the run itself.
            run_id = message.get("id") if message.get("type") == "run" \
                else message.get("run_id")
            if gateway.may_see(who, run_id):
                yield f"event: {message['type']}\ndata: {json.dumps(wire(message))}\n\n"


def event_stream(gateway: Gateway, who: Principal, tokens: Tokens, token: str, *,
                 stopping: asyncio.Event, disconnected: Callable[[], Awaitable[bool]],
                 hello: str = ": connected\n\n", tick: str | None = None) -> LeasedStream:
    """Request and run changes ``who`` may see, as an SSE response; QuotaExceeded when the
    requester holds ``limits.sse_streams`` streams already. It ends when ``stopping`` is
    set, the client goes away, or ``token`` is revoked."""
    held = lease(gateway, who, Quota.SSE_STREAMS)
    revoked = asyncio.Event()
    unwatch = tokens.watch(token, revoked.set)
    return LeasedStream(_events(gateway, who, stopping, revoked, disconnected, hello, tick),
                        held, unwatch, media_type="text/event-stream",
                        headers={"Cache-Control": "no-cache"})
