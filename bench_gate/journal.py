"""Journaling reads with group commit.

Every read is journaled before its answer leaves the gateway. A read alone is journaled at
once, on the loop, which is quickest for one script. When reads overlap (several clients),
they are journaled together on the journal's own thread: one statement and one commit for
the whole group, while the loop goes on serving, and each read still waits for its commit.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools

from .models import Event
from .store import Store

__all__ = ["ReadJournal"]

#: Events per commit; a larger group is split over several commits, whole reads each.
MAX_GROUP = 512


def _retrieved(done: asyncio.Future[None]) -> None:
    if not done.cancelled():
        done.exception()  # heard even if its read's caller has gone


class ReadJournal:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._queue: collections.deque[tuple[list[Event], asyncio.Future[None]]] = \
            collections.deque()
        self._flusher: asyncio.Task[None] | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        #: Reads between their lane job and their journal entry (the gateway counts them).
        self.reading = 0

    async def append(self, events: list[Event]) -> None:
        """Journal one read's events (atomically) and return once they are committed."""
        if self._flusher is None and self.reading <= 1:
            self.store.append(events, durable=False)
            return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        done.add_done_callback(_retrieved)
        self._queue.append((events, done))
        if self._flusher is None:
            self._flusher = loop.create_task(self._flush())
        # Shielded: a caller that gives up does not take its entry out of the journal.
        await asyncio.shield(done)

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="journal")
        try:
            while self._queue:
                group: list[tuple[list[Event], asyncio.Future[None]]] = []
                size = 0
                while self._queue and (not group or size + len(self._queue[0][0]) <= MAX_GROUP):
                    item = self._queue.popleft()
                    group.append(item)
                    size += len(item[0])
                events = [e for evs, _ in group for e in evs]
                try:
                    await loop.run_in_executor(
                        self._pool, functools.partial(self.store.append, events, durable=False))
                except Exception as exc:  # the store failed: every read of the group hears it
                    for _, done in group:
                        if not done.done():
                            done.set_exception(exc)
                else:
                    for _, done in group:
                        if not done.done():
                            done.set_result(None)
        finally:
            self._flusher = None

    async def close(self) -> None:
        if self._flusher is not None:
            await asyncio.shield(self._flusher)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
