"""Journaling reads with group commit; what an approval means in words; retention.

Every read is journaled before its answer leaves the gateway. A read alone is journaled at
once, on the loop, which is quickest for one script. When reads overlap (several clients),
they are journaled together on the journal's own thread: one statement and one commit for
the whole group, while the loop goes on serving, and each read still waits for its commit.
Either way the events go through ``Store.append``, which chains them (one hash chain per
store, ``bench_gate.store._chain``).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .config import BenchConfig, JournalConfig
from .errors import GatewayError
from .models import Action, ApprovalKind, Event

if TYPE_CHECKING:  # the store imports this module (approval_meaning): no import at run time
    from .store import ChainReport, Segment, Store

__all__ = ["ReadJournal", "Retention", "approval_meaning", "verify_chain"]

logger = logging.getLogger(__name__)


def approval_meaning(kind: ApprovalKind | str, actions: Iterable[Action], *,
                     message: str = "") -> str:
    """What an approval of ``kind`` means, in the words its approver is shown beside the
    box they tick (the console's request page): ``I approve the setpoint: CH1 voltage
    setpoint 0.000 V → 5.000 V``. Built from each action's ``words``; ``message`` (the
    request's command) is what a state change shows when no action has words."""
    kind = ApprovalKind(kind)
    actions = list(actions)
    if kind is ApprovalKind.SETPOINT:
        words = "; ".join(a.words for a in actions if a.approval is ApprovalKind.SETPOINT)
        return f"I approve the setpoint: {words or 'the setpoint this output needs'}"
    if kind is ApprovalKind.OUTPUT_ENABLE:
        channels = ", ".join(f"CH{a.channel}" for a in actions
                             if a.approval is ApprovalKind.OUTPUT_ENABLE)
        return (f"I approve the output enable: the output of {channels} turns ON and the "
                "DUT is energized")
    changes = "; ".join(a.words or a.canonical for a in actions
                        if a.effect not in ("read", "select"))
    return f"I approve the state change: {changes or message}"

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


class _Bench(Protocol):
    """What :func:`verify_chain` needs of the gateway."""

    @property
    def store(self) -> Store: ...
    @property
    def config(self) -> BenchConfig: ...


def verify_chain(gateway: _Bench) -> ChainReport:
    """Walk the journal's whole hash chain: the archived segments (looked for in ``[journal]
    archive_dir`` first, else where they were written), then the store, to its head. For the
    doors, through ``Gateway.verify_journal`` once the façade has it (GET /v1/journal/verify
    calls this meanwhile)."""
    from .store import verify_store

    folder = gateway.config.journal.archive_dir
    return verify_store(gateway.store, Path(folder) if folder else None)


class Retention:
    """``[journal] keep_days``: archive the events older than that to segment files and
    delete them from the store (``bench_gate.store.archive``), at most once per ``every``,
    in a worker thread. The gateway's sweeper calls :meth:`tick`, which never waits for
    the archive; off by default."""

    def __init__(self, store: Store, config: JournalConfig, clock: Callable[[], datetime],
                 every: timedelta = timedelta(hours=1)) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self.every = every
        self._last: datetime | None = None
        self._task: asyncio.Task[list[Segment]] | None = None
        #: Events archived by this gateway, and why the last archive failed (if it did).
        self.archived = 0
        self.last_error: str | None = None

    def tick(self) -> asyncio.Task[list[Segment]] | None:
        """Start an archive if the policy is on, none is running and the last one started
        ``every`` ago; the task it started, if any (on the running loop)."""
        keep = self.config.keep_days
        at = self.clock()
        if keep is None or (self._task is not None and not self._task.done()) \
                or (self._last is not None and at - self._last < self.every):
            return None
        self._last = at
        self._task = asyncio.get_running_loop().create_task(
            self.archive(at - timedelta(days=keep)))
        return self._task

    async def archive(self, before: datetime) -> list[Segment]:
        """Archive the events journaled before ``before`` now, in a worker thread."""
        from .store import archive, default_archive_dir

        folder = default_archive_dir(self.store, self.config.archive_dir)
        try:
            done = await asyncio.to_thread(archive, self.store, before, folder)
        except GatewayError as exc:  # a broken chain, an unwritable folder: said, retried
            self.last_error = exc.message
            logger.warning("journal retention: %s", exc.message)
            return []
        self.last_error = None
        self.archived += sum(s.events for s in done)
        return done

    async def close(self) -> None:
        """Wait for an archive that is under way (its thread cannot be stopped midway)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
