"""What the gateway did that the store did not take: journaled once it is back, in order.

A safe action and its alert never wait for the store (DESIGN.md invariant 4): an event the
store refuses right then (PostgreSQL down, SQLite locked) is kept here, and each sweep of
the safe actions writes what is kept, in order, off the event loop (it may wait).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from .errors import StoreError
from .models import Event
from .store import Store

__all__ = ["Later"]


class Later:
    def __init__(self, store: Callable[[], Store]) -> None:
        self._store = store
        #: Events the store refused, oldest first.
        self.kept: list[Event] = []
        self._flushing = False

    def journal(self, event: Event) -> None:
        """Journal ``event``, or keep it for when the store is back."""
        if self.kept:  # in their order
            self.kept.append(event)
            return
        try:
            self._store().append([event])
        except StoreError:
            self.kept.append(event)

    def tick(self, spawn: Callable[[Any], Any]) -> None:
        """From a sweep: write what is kept, on a worker thread, one flush at a time."""
        if self.kept and not self._flushing:
            self._flushing = True
            spawn(self._flush())

    async def _flush(self) -> None:
        try:
            events = list(self.kept)
            await asyncio.to_thread(self._store().append, events)  # off the loop: it may wait
            del self.kept[:len(events)]
        except StoreError:
            pass  # still away: the next tick again
        finally:
            self._flushing = False
