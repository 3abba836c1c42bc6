"""Telling people and waiters what changed: the live event fan-out (console, CLI ``watch``,
SSE), the waiters keyed by request id (a waiter holds no thread: it awaits an event), and
the notification other gateways on a shared store hear (PostgreSQL LISTEN/NOTIFY).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

from .errors import GatewayError
from .models import TakeoverRequest
from .store import Store

__all__ = ["Notifier"]

#: Events a slow subscriber may lag behind before it misses some (it re-fetches anyway).
QUEUE_DEPTH = 1000


class Notifier:
    def __init__(self, store: Store, bench: str) -> None:
        self.store = store
        self.bench = bench
        self._subscribers: set[asyncio.Queue[dict[str, Any]]] = set()
        self._waiters: dict[str, set[asyncio.Event]] = {}

    @property
    def origin(self) -> int:
        """Who sent a store notification: this gateway ignores its own."""
        return id(self)

    def publish(self, kind: str, **data: Any) -> None:
        message = {"type": kind, **data}
        for queue in list(self._subscribers):
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(message)

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
        """Changes to requests and runs, for the console, the CLI and SSE."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=QUEUE_DEPTH)
        self._subscribers.add(queue)
        try:
            yield queue
        finally:
            self._subscribers.discard(queue)

    @contextlib.contextmanager
    def waiting(self, key: str) -> Iterator[asyncio.Event]:
        """An event set by the next ``wake(key)``. Register it before reading the state it
        waits on, so a change between the read and the wait is never missed."""
        event = asyncio.Event()
        self._waiters.setdefault(key, set()).add(event)
        try:
            yield event
        finally:
            waiting = self._waiters.get(key)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._waiters[key]

    def waiters(self, key: str) -> int:
        return len(self._waiters.get(key, ()))

    def wake(self, key: str) -> None:
        for event in self._waiters.get(key, ()):
            event.set()

    def request_changed(self, req: TakeoverRequest) -> None:
        """A request moved: wake its waiters, tell subscribers and the other gateways."""
        self.wake(req.id)
        # The proposal too: a page left open on a pending request learns it was edited
        # (a new proposal, still pending), not only that its status moved.
        message = {"id": req.id, "run_id": req.run_id, "status": req.status.value,
                   "instrument": req.instrument, "bench": req.bench or self.bench,
                   "proposal_hash": req.proposal_hash}
        self.publish("request", **message)
        with contextlib.suppress(GatewayError):  # a lost notification is caught by the sweep
            self.store.notify({"type": "request", "origin": self.origin, **message})
