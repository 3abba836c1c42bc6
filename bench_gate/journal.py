"""Journaling reads through the read log; what an approval means in words; retention.

Every read is journaled before its answer leaves the gateway: its events are one record
written to the gateway's read log, which survives a crash of the process. The log is
folded into the journal in batches on the journal's own thread, and before any other event
is journaled or the journal is read (the store does that), so the journal keeps one order
and one hash chain (``bench_gate.store._chain``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import re
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .config import BenchConfig, JournalConfig, data_dir
from .errors import GatewayError
from .models import Action, ApprovalKind

if TYPE_CHECKING:  # the store imports this module (approval_meaning): no import at run time
    from .store import ChainReport, ReadLog, ReadRow, Segment, Store

__all__ = ["PLAN_OUTPUT", "PLAN_SETPOINT", "ReadJournal", "Retention", "approval_meaning",
           "verify_chain"]

logger = logging.getLogger(__name__)


#: What a plan's approval of each half means, before its scope in words (the console's box
#: says the same).
PLAN_SETPOINT = "a standing plan: every write inside it runs without asking again: "
PLAN_OUTPUT = "a standing plan that switches outputs on, unattended, inside its scope: "


def approval_meaning(kind: ApprovalKind | str, actions: Iterable[Action], *,
                     message: str = "", present: Iterable[str] = (),
                     cover: Iterable[str] = ()) -> str:
    """What an approval of ``kind`` means, in the words its approver is shown beside the
    box they tick (the console's request page): ``I approve the setpoint: CH1 voltage
    setpoint 0.000 V → 5.000 V``. Built from each action's ``words``, and for a setpoint
    the ``present`` fields it approves as they are (``handoff.present_words``); ``message``
    (the request's command) is what a state change shows when no action has words; for an
    output enable, ``cover`` is the approved setpoint it stands on (``handoff.cover_words``),
    the values its approver read beside the box."""
    kind = ApprovalKind(kind)
    actions = list(actions)
    scope = "; ".join(a.words for a in actions if a.effect == "plan")
    if scope and kind is ApprovalKind.SETPOINT:  # a plan: a standing approval, its scope
        return f"I approve the setpoint: {PLAN_SETPOINT}{scope}"
    if scope and kind is ApprovalKind.OUTPUT_ENABLE:
        return f"I approve the output enable: {PLAN_OUTPUT}{scope}"
    if kind is ApprovalKind.SETPOINT:
        words = "; ".join([*(a.words for a in actions if a.approval is ApprovalKind.SETPOINT),
                           *present])
        return f"I approve the setpoint: {words or 'the setpoint this output needs'}"
    if kind is ApprovalKind.OUTPUT_ENABLE:
        channels = ", ".join(f"CH{a.channel}" for a in actions
                             if a.approval is ApprovalKind.OUTPUT_ENABLE)
        at = ", ".join(cover)
        return (f"I approve the output enable: the output of {channels} turns ON and the "
                "DUT is energized" + (f" at {at}" if at else ""))
    changes = "; ".join(a.words or a.canonical for a in actions
                        if a.effect not in ("read", "select"))
    return f"I approve the state change: {changes or message}"

#: Reads waiting in the log that start a fold at once, without waiting ``fold_seconds``.
FOLD_AT = 256


def read_log_path(store: Store, config: BenchConfig) -> Path | None:
    """Where this gateway's read log lives: ``[journal] read_log``; else beside a SQLite
    store's file; else (PostgreSQL) in the data directory, named by bench and database, so
    gateways sharing a database never share a log. None for an in-memory store."""
    if config.journal.read_log:
        return Path(config.journal.read_log).expanduser()
    digest = hashlib.sha256(config.bench.encode()).hexdigest()[:8]
    name = re.sub(r"[^A-Za-z0-9._-]", "_", config.bench)[:40] + "-" + digest
    path = getattr(store, "path", None)
    if isinstance(path, str):
        return None if path == ":memory:" else \
            Path(path).resolve().with_name(f"{Path(path).name}.reads-{name}")
    where = hashlib.sha256(str(getattr(store, "where", "")).encode()).hexdigest()[:8]
    return data_dir() / "read-logs" / f"{name}@{where}.log"


class ReadJournal:
    """Journals each read before its answer leaves: one record written to the read log
    (bench_gate/store/_readlog.py), folded into the journal ``fold_seconds`` later (or at
    once when ``FOLD_AT`` wait) on the journal's own thread, in one transaction per batch.
    Without a log (not started, or an in-memory store) a read is appended at once."""

    def __init__(self, store: Store, path: Path | None = None,
                 fold_seconds: float = 0.05) -> None:
        self.store = store
        self.path = path
        self.fold_seconds = fold_seconds
        self.log: ReadLog | None = None
        #: Reads a crash had left in the log, folded when it was opened.
        self.recovered = 0
        self._timer: asyncio.TimerHandle | None = None
        self._folding: asyncio.Task[None] | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def open(self) -> int:
        """Open the log and fold what a crash left in it, in its order: the gateway does
        this before it journals or serves anything else."""
        if self.path is None or self.log is not None:
            return 0
        from .store import ReadLog

        log = ReadLog(self.path)
        try:
            self.recovered = self.store.attach_reads(log)
        except BaseException:
            log.close()
            raise
        self.log = log
        return self.recovered

    def append_rows(self, rows: list[ReadRow]) -> None:
        """Journal one read's events, as ``store.read_row`` (or ``rows_of``, or a
        ``ReadTemplate``) gives them; returns once they would survive a crash."""
        self.store.log_read_rows(rows)
        log = self.log
        if log is not None and self._folding is None:
            if log.pending >= FOLD_AT:
                self._fold_now()
            elif self._timer is None:
                self._timer = asyncio.get_running_loop().call_later(
                    self.fold_seconds, self._fold_now)

    def _fold_now(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._folding is None:
            self._folding = asyncio.get_running_loop().create_task(self._fold())

    async def _fold(self) -> None:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="journal")
        try:
            await asyncio.get_running_loop().run_in_executor(self._pool, self.store.fold_reads)
        except Exception as exc:  # the reads stay in the log, folded at the next try
            logger.warning("journal: folding the read log failed: %s", exc)
        finally:
            self._folding = None
        log = self.log
        if log is not None and log.pending and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(
                self.fold_seconds, self._fold_now)

    async def close(self) -> None:
        """Fold everything, then close the log."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._folding is not None:
            await asyncio.shield(self._folding)
        log, self.log = self.log, None
        try:
            if log is not None:
                self.store.detach_reads()
        finally:
            if log is not None:
                log.close()
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
