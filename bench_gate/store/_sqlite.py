"""SQLite store: one file, WAL, ``synchronous=FULL`` so an acknowledged event survives a
crash, and a schema versioned by migrations from the first version on."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import StoreError
from ..models import Event
from . import _queries as q
from ._base import PendingCheck
from ._chain import GENESIS, LOST, Chain, backfill
from ._readlog import READ_LOG_TABLE, Row, chained
from ._sql import SqlStore, Tx
from ._sqlite_schema import MIGRATIONS

__all__ = ["MIGRATIONS", "SqliteStore"]

#: Seconds a statement waits for SQLite's lock held by another connection (a backup, another
#: process) before it fails with StoreError: ``SqliteStore(path, busy_timeout=...)``.
BUSY_TIMEOUT = 5.0
#: Rows in one INSERT (eight parameters each, well under SQLite's 32,766).
_MAX_ROWS = 2000
#: ``RETURNING`` (3.35) and ``ON CONFLICT`` upserts (3.24), in ``_queries.py``.
_SQLITE_MIN = (3, 35)
#: Appends on the one-statement path that may find the chain's head moved, one after the
#: other, before the append gives up.
_CHAIN_RETRIES = 50
#: The highest seq the journal ever gave (AUTOINCREMENT keeps it, also after a deletion).
_TOP = "SELECT seq FROM sqlite_sequence WHERE name = 'journal'"
_JOURNAL_INSERT = ("INSERT INTO journal (seq, run_id, request_id, type, at, data, prev, hash) "
                   "VALUES ")
_JOURNAL_ROW = "(?, ?, ?, ?, ?, ?, ?, ?)"

def _statements(script: str) -> Iterator[str]:
    """The statements of a migration script (a trigger, with the semicolons of its body,
    is one statement)."""
    buffer = ""
    for piece in script.split(";"):
        buffer += piece + ";"
        if sqlite3.complete_statement(buffer):
            if buffer.strip().strip(";").strip():
                yield buffer
            buffer = ""


def _create_private(path: Path) -> None:
    """A new store file readable by its owner only (the journal says who approved what;
    SQLite gives its -wal and -shm files the database file's permissions)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        pass
    except OSError as exc:
        raise StoreError(f"cannot create the store {str(path)!r}: {exc.strerror or exc}") \
            from exc


class SqliteStore(SqlStore):
    """The store in one SQLite file (or ``:memory:``)."""

    _listed = q.LISTED_UTF8
    _clock_sql = "SELECT (julianday('now') - 2440587.5) * 86400.0"

    def __init__(self, path: str | Path, *, busy_timeout: float = BUSY_TIMEOUT) -> None:
        self.path = str(path)
        self.busy_timeout = busy_timeout
        busy = f"PRAGMA busy_timeout={_milliseconds(busy_timeout)}"
        if sqlite3.sqlite_version_info < _SQLITE_MIN:  # ON CONFLICT ... RETURNING
            raise StoreError(f"SQLite {sqlite3.sqlite_version} is too old: the store needs "
                             f"{'.'.join(map(str, _SQLITE_MIN))} or newer")
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            _create_private(Path(self.path))
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False,
                                       isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute(busy)
            # Reads' journal entries commit here: same file and WAL, no fsync per commit.
            self._fast = self._db
            if self.path != ":memory:":  # another connection would open another database
                self._fast = sqlite3.connect(self.path, check_same_thread=False,
                                             isolation_level=None)
                self._fast.execute("PRAGMA synchronous=NORMAL")
                self._fast.execute(busy)
            # A read while another thread holds the store (a write waiting for SQLite's
            # lock, up to busy_timeout) reads the last commit here at once: WAL lets it. So
            # the loop never stalls behind a locked store (a safe action runs on it).
            self._reader = self._db
            if self.path != ":memory:":
                self._reader = sqlite3.connect(self.path, check_same_thread=False,
                                               isolation_level=None)
                self._reader.execute(busy)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the store {self.path!r}: {exc}") from exc
        self._lock = threading.RLock()
        self._reader_lock = threading.Lock()
        # Its own lock for its own connection: a read being journaled on the journal's
        # thread never makes the loop wait to read a run (WAL lets the two overlap).
        self._fast_lock = self._lock if self._fast is self._db else threading.Lock()
        self.pending_check: PendingCheck | None = None
        #: The journal chain's head, as this store last saw it; and the head a write
        #: transaction moves it to when it commits.
        self._chain = Chain()
        self._moving: tuple[int, str] | None = None
        self.migrate()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._moving = None
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StoreError(f"store error: {exc}") from exc
            finally:
                moved, self._moving = self._moving, None
            if moved is not None:  # committed: the head is there now
                self._chain.moved(*moved)

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """The store's own connection if no other thread holds it (inside a transaction:
        its own writes), else the reader: it sees the last commit without waiting."""
        if self._lock.acquire(blocking=self._reader is self._db):
            try:
                yield self._db
            finally:
                self._lock.release()
        else:
            with self._reader_lock:
                yield self._reader

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._reading() as db:
            try:
                return db.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"store error: {exc}") from exc

    def _read_together(self, *queries: tuple[str, tuple[Any, ...]]
                       ) -> list[list[tuple[Any, ...]]]:
        """Several SELECTs in one read transaction: they see the same moment."""
        with self._reading() as db:
            try:
                db.execute("BEGIN")
                try:
                    return [db.execute(sql, args).fetchall() for sql, args in queries]
                finally:
                    db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StoreError(f"store error: {exc}") from exc

    def schema_version(self) -> int:
        return int(self._read("PRAGMA user_version")[0][0])

    def migrate(self) -> None:
        with self._tx() as db:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if version > len(MIGRATIONS):
                raise StoreError(f"the store's schema v{version} is newer than this gateway's")
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                for statement in _statements(script):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {number}")
            if version < q.CHAIN_MIGRATION <= len(MIGRATIONS):
                backfill(lambda sql, args: db.execute(sql, args).fetchall())
            self._chain.reset(*_head(db))

    def _time(self, at: datetime) -> str:
        # Compared and sorted as text: one offset (UTC) for every instant, or a time on
        # another offset (a clock on local time) sorted by its wall-clock digits.
        return (at.astimezone(UTC) if at.tzinfo is not None else at).isoformat()

    # BEGIN IMMEDIATE takes the one write lock: counts and archives are serialized already.
    def _lock_requester(self, cx: Tx, requester: str) -> None:
        return None

    def _lock_archive(self, cx: Tx) -> None:
        return None

    # -- journal
    def _append(self, cx: Tx, events: list[Event]) -> None:
        """Chain and insert ``events`` inside the write transaction (on ``self._db``), which
        holds the head where it is until the commit."""
        if not events:
            return
        self._db.executemany(_JOURNAL_INSERT + _JOURNAL_ROW,
                             Chain.extend(events, *_head(self._db)))
        self._moving = (events[-1].seq, events[-1].hash)

    def append(self, events: list[Event], durable: bool = True) -> list[Event]:
        """Journal events. ``durable=False`` (reads, which change nothing) skips the fsync:
        the events survive a crash of the process, and reach the disk for good with the
        next durable commit, so a busy read path does not pay an fsync per query."""
        if events:
            self.fold_reads()
        if durable or not events or self._fast is self._db or len(events) > _MAX_ROWS:
            with self._tx() as db:
                self._append(db, events)
            return events
        # One statement is one atomic transaction: no BEGIN/COMMIT round trips. It continues
        # the head this store last saw (moved only by commits); if another connection moved
        # it since, the first seq is taken, the statement fails whole, and it is chained
        # again after the head read back.
        sql = _JOURNAL_INSERT + ", ".join([_JOURNAL_ROW] * len(events))
        for _ in range(_CHAIN_RETRIES):
            seq, prev = self._chain.known()
            args = [a for row in Chain.extend(events, seq, prev) for a in row]
            with self._fast_lock:
                try:
                    self._fast.execute(sql, args)
                except sqlite3.IntegrityError as exc:
                    if "journal.seq" not in str(exc):
                        raise StoreError(f"store error: {exc}") from exc
                    try:
                        self._chain.reset(*_head(self._fast))
                    except sqlite3.Error as again:
                        raise StoreError(f"store error: {again}") from again
                    continue
                except sqlite3.Error as exc:
                    raise StoreError(f"store error: {exc}") from exc
            self._chain.moved(events[-1].seq, events[-1].hash)
            return events
        raise StoreError(f"the journal's head moved under {_CHAIN_RETRIES} appends in a row; "
                         "nothing of this one was journaled")

    def fold_rows(self, rows: list[Row], log_id: str, upto: int) -> None:
        """On the ``synchronous=NORMAL`` connection: the next durable commit makes it
        durable, as a read's own commit was before the read log."""
        mark = (READ_LOG_TABLE, log_id, json.dumps({"lsn": upto}))
        if self._fast is self._db:
            with self._tx() as cx:
                cx.execute(q.KV_PUT, mark)
                done = chained(rows, *_head(self._db))
                self._db.executemany(_JOURNAL_INSERT + _JOURNAL_ROW, done)
                self._moving = (done[-1][0], done[-1][7])
            return
        db = self._fast
        with self._fast_lock:
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    done = chained(rows, *_head(db))
                    db.executemany(_JOURNAL_INSERT + _JOURNAL_ROW, done)
                    db.execute(q.KV_PUT, mark)
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StoreError(f"store error: {exc}") from exc
        self._chain.moved(done[-1][0], done[-1][7])

    # -- the chain (bench_gate.store._chain)
    def journal_head(self) -> tuple[int, str]:
        self.fold_reads()
        with self._lock:
            try:
                return _head(self._db)
            except sqlite3.Error as exc:
                raise StoreError(f"store error: {exc}") from exc

    def notify(self, message: dict[str, Any]) -> None:
        """One SQLite file serves one gateway: there is nobody else to tell."""

    def listen(self, callback: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        return lambda: None

    def close(self) -> None:
        with self._lock, self._fast_lock, self._reader_lock:
            if self._fast is not self._db:
                self._fast.close()
            if self._reader is not self._db:
                self._reader.close()
            self._db.close()


def _milliseconds(seconds: object) -> int:
    """``busy_timeout`` in SQLite's milliseconds: a number of seconds in (0, 3600]."""
    if (isinstance(seconds, bool) or not isinstance(seconds, int | float)
            or not math.isfinite(seconds) or not 0 < seconds <= 3600):
        raise StoreError(f"busy_timeout must be seconds, more than 0 and at most 3600, "
                         f"not {seconds!r}")
    return max(1, round(seconds * 1000))


def _head(db: sqlite3.Connection) -> tuple[int, str]:
    """The chain's head: the newest event (or, all archived, the newest segment's end). If
    AUTOINCREMENT has given a higher seq than that, the newest events were deleted: the
    head is that seq with :data:`LOST` for a hash, so the next event does not link over the
    gap (``journal verify`` names it)."""
    row = db.execute(q.LAST_CHAINED).fetchone() or db.execute(q.LAST_SEGMENT).fetchone()
    seq, hash_ = (int(row[0]), str(row[1])) if row else (0, GENESIS)
    top = db.execute(_TOP).fetchone()
    if top is not None and int(top[0]) > seq:
        return int(top[0]), LOST
    return seq, hash_
