"""SQLite store: one file, WAL, ``synchronous=FULL`` so an acknowledged event survives a
crash, and a schema versioned by migrations from the first version on."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import StoreError
from ..models import Event, Run, Status, TakeoverRequest
from . import _queries as q
from ._base import PendingCheck, RequestPage, RequestSort
from ._chain import (
    GENESIS,
    LOST,
    Chain,
    Segment,
    backfill,
    row_event,
    row_segment,
    with_meanings,
)

__all__ = ["MIGRATIONS", "SqliteStore"]

#: Rows in one INSERT (eight parameters each, well under SQLite's 32,766).
_MAX_ROWS = 2000
#: Appends on the one-statement path that may find the chain's head moved, one after the
#: other, before the append gives up.
_CHAIN_RETRIES = 50
#: The highest seq the journal ever gave (AUTOINCREMENT keeps it, also after a deletion).
_TOP = "SELECT seq FROM sqlite_sequence WHERE name = 'journal'"
_JOURNAL_INSERT = ("INSERT INTO journal (seq, run_id, request_id, type, at, data, prev, hash) "
                   "VALUES ")
_JOURNAL_ROW = "(?, ?, ?, ?, ?, ?, ?, ?)"

#: Each entry moves the schema one version up. Never edit a released entry: append.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        created_at TEXT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE TABLE requests (
        id TEXT PRIMARY KEY,
        run_id TEXT NOT NULL,
        instrument TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        idempotency_key TEXT,
        version INTEGER NOT NULL,
        data TEXT NOT NULL,
        UNIQUE (run_id, idempotency_key)
    );
    CREATE INDEX requests_status ON requests (status, created_at);
    CREATE INDEX requests_run ON requests (run_id, created_at);
    CREATE TABLE journal (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        request_id TEXT,
        type TEXT NOT NULL,
        at TEXT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX journal_run ON journal (run_id, seq);
    CREATE TABLE setpoints (
        instrument TEXT NOT NULL,
        channel INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (instrument, channel)
    );
    CREATE TABLE kv (
        tbl TEXT NOT NULL,
        key TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (tbl, key)
    );
    """,
    # 2: who owns a run and whether it is closed, as columns (per-requester quotas count
    # them); the queue sorted by expiry.
    """
    ALTER TABLE runs ADD COLUMN principal TEXT;
    ALTER TABLE runs ADD COLUMN status TEXT;
    UPDATE runs SET principal = json_extract(data, '$.principal'),
                    status = json_extract(data, '$.status');
    CREATE INDEX runs_principal ON runs (principal, status);
    CREATE INDEX requests_expiry ON requests (status, expires_at);
    """,
    # 3: each request names its requester (its run's principal), so one requester's
    # pending requests are counted from an index, however many others wait.
    """
    ALTER TABLE requests ADD COLUMN requester TEXT;
    UPDATE requests SET requester = (SELECT principal FROM runs WHERE runs.id = requests.run_id);
    CREATE INDEX requests_requester ON requests (requester, status, expires_at);
    """,
    # 4: the journal's hash chain (bench_gate.store._chain): each event's prev-hash and
    # hash, and the archived segments. The store then chains the events it holds, in seq
    # order. (The head is the newest event, or segment, and AUTOINCREMENT's counter: no row
    # of its own to rewrite with every commit.)
    """
    ALTER TABLE journal ADD COLUMN prev TEXT;
    ALTER TABLE journal ADD COLUMN hash TEXT;
    CREATE TABLE journal_segments (
        first_seq INTEGER PRIMARY KEY,
        last_seq INTEGER NOT NULL,
        events INTEGER NOT NULL,
        prev TEXT NOT NULL,
        last_hash TEXT NOT NULL,
        path TEXT NOT NULL,
        archived_at TEXT NOT NULL
    );
    """,
)


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


class SqliteStore:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False,
                                       isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA busy_timeout=5000")
            # Reads' journal entries commit here: same file and WAL, no fsync per commit.
            self._fast = self._db
            if self.path != ":memory:":  # another connection would open another database
                self._fast = sqlite3.connect(self.path, check_same_thread=False,
                                             isolation_level=None)
                self._fast.execute("PRAGMA synchronous=NORMAL")
                self._fast.execute("PRAGMA busy_timeout=5000")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the store {self.path!r}: {exc}") from exc
        self._lock = threading.RLock()
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

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"store error: {exc}") from exc

    def _read_together(self, *queries: tuple[str, tuple[Any, ...]]
                       ) -> list[list[tuple[Any, ...]]]:
        """Several SELECTs in one read transaction: they see the same moment."""
        with self._lock:
            try:
                self._db.execute("BEGIN")
                try:
                    return [self._db.execute(sql, args).fetchall() for sql, args in queries]
                finally:
                    self._db.execute("COMMIT")
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

    # -- runs
    def create_run(self, run: Run, events: list[Event]) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO runs (id, created_at, principal, status, data) "
                       "VALUES (?, ?, ?, ?, ?)",
                       (run.id, run.created_at.isoformat(), run.principal, run.status.value,
                        run.model_dump_json()))
            self._append(db, events)

    def save_run(self, run: Run, events: list[Event]) -> None:
        with self._tx() as db:
            db.execute("UPDATE runs SET data = ?, status = ? WHERE id = ?",
                       (run.model_dump_json(), run.status.value, run.id))
            self._append(db, events)

    def get_run(self, run_id: str) -> Run | None:
        rows = self._read("SELECT data FROM runs WHERE id = ?", (run_id,))
        return Run.model_validate_json(rows[0][0]) if rows else None

    def list_runs(self, limit: int = 100, offset: int = 0, principal: str | None = None
                  ) -> list[Run]:
        if principal is None:
            rows = self._read("SELECT data FROM runs ORDER BY created_at DESC, id "
                              "LIMIT ? OFFSET ?", (limit, offset))
        else:  # filtered in the query, before the page is cut
            rows = self._read("SELECT data FROM runs WHERE principal = ? "
                              "ORDER BY created_at DESC, id LIMIT ? OFFSET ?",
                              (principal, limit, offset))
        return [Run.model_validate_json(r[0]) for r in rows]

    # -- requests
    def create_request(self, req: TakeoverRequest, events: list[Event]) -> TakeoverRequest:
        with self._tx() as db:
            if req.idempotency_key is not None:
                row = db.execute(
                    "SELECT data FROM requests WHERE run_id = ? AND idempotency_key = ?",
                    (req.run_id, req.idempotency_key)).fetchone()
                if row:
                    return TakeoverRequest.model_validate_json(row[0])
            row = db.execute(q.RUN_PRINCIPAL, (req.run_id,)).fetchone()
            requester = str(row[0]) if row and row[0] is not None else None
            self._admit(db, req, requester)
            db.execute(
                "INSERT INTO requests (id, run_id, instrument, status, created_at, expires_at,"
                " idempotency_key, version, requester, data) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (req.id, req.run_id, req.instrument, req.status.value,
                 req.created_at.isoformat(), req.expires_at.isoformat(), req.idempotency_key,
                 req.version, requester, req.model_dump_json()))
            self._append(db, events)
        return req

    def _admit(self, db: sqlite3.Connection, req: TakeoverRequest, requester: str | None
               ) -> None:
        """The pending-request quota, inside the inserting transaction (which holds SQLite's
        write lock, so two inserts never both take the last slot)."""
        check = self.pending_check
        if check is None or requester is None or req.status is not Status.PENDING \
                or req.supersedes is not None:
            return  # a stale request's fresh replacement is no new filing

        def count() -> tuple[int, datetime | None]:
            found = db.execute(q.PENDING_OF, (requester,)).fetchone()
            return int(found[0]), datetime.fromisoformat(found[1]) if found[1] else None
        check(requester, count)

    def save_request(self, req: TakeoverRequest, expected_version: int,
                     events: list[Event]) -> bool:
        req.version = expected_version + 1
        with self._tx() as db:
            cur = db.execute(
                "UPDATE requests SET status = ?, version = ?, data = ? "
                "WHERE id = ? AND version = ?",
                (req.status.value, req.version, req.model_dump_json(), req.id,
                 expected_version))
            if cur.rowcount != 1:
                req.version = expected_version
                return False
            self._append(db, with_meanings(req, events))
        return True

    def get_request(self, request_id: str) -> TakeoverRequest | None:
        rows = self._read("SELECT data FROM requests WHERE id = ?", (request_id,))
        return TakeoverRequest.model_validate_json(rows[0][0]) if rows else None

    def find_request(self, run_id: str, idempotency_key: str) -> TakeoverRequest | None:
        rows = self._read("SELECT data FROM requests WHERE run_id = ? AND idempotency_key = ?",
                          (run_id, idempotency_key))
        return TakeoverRequest.model_validate_json(rows[0][0]) if rows else None

    def list_requests(self, status: Status | None = None, run_id: str | None = None,
                      instrument: str | None = None, limit: int = 100,
                      offset: int = 0) -> list[TakeoverRequest]:
        sql, args, _, _ = q.page(status, run_id, instrument, None, RequestSort.NEWEST,
                                 limit, offset)
        return [TakeoverRequest.model_validate_json(r[0]) for r in self._read(sql, args)]

    def page_requests(self, status: Status | None = None, run_id: str | None = None,
                      instrument: str | None = None, limit: int = 100, offset: int = 0,
                      sort: RequestSort | str = RequestSort.NEWEST,
                      requester: str | None = None) -> RequestPage:
        sort = RequestSort(sort)
        sql, args, count_sql, count_args = q.page(status, run_id, instrument, requester,
                                                  sort, limit, offset)
        rows, counted = self._read_together((sql, args), (count_sql, count_args))
        return RequestPage((TakeoverRequest.model_validate_json(r[0]) for r in rows),
                           int(counted[0][0]), limit=limit, offset=offset, order=sort)

    def pending_of(self, principal: str) -> tuple[int, datetime | None]:
        row = self._read(q.PENDING_OF, (principal,))[0]
        return int(row[0]), datetime.fromisoformat(row[1]) if row[1] else None

    def open_runs_of(self, principal: str) -> int:
        return int(self._read(q.OPEN_RUNS_OF, (principal,))[0][0])

    def due_for_expiry(self, at_iso: str) -> list[TakeoverRequest]:
        rows = self._read("SELECT data FROM requests WHERE status = 'pending' AND expires_at <= ?",
                          (at_iso,))
        return [TakeoverRequest.model_validate_json(r[0]) for r in rows]

    def unfinished(self) -> list[TakeoverRequest]:
        rows = self._read("SELECT data FROM requests WHERE status IN ('approved', 'executing')")
        return [TakeoverRequest.model_validate_json(r[0]) for r in rows]

    # -- journal
    def _append(self, db: sqlite3.Connection, events: list[Event]) -> None:
        """Chain and insert ``events`` inside ``db``'s write transaction, which holds the
        head where it is until the commit."""
        if not events:
            return
        db.executemany(_JOURNAL_INSERT + _JOURNAL_ROW, Chain.extend(events, *_head(db)))
        self._moving = (events[-1].seq, events[-1].hash)

    def append(self, events: list[Event], durable: bool = True) -> list[Event]:
        """Journal events. ``durable=False`` (reads, which change nothing) skips the fsync:
        the events survive a crash of the process, and reach the disk for good with the
        next durable commit, so a busy read path does not pay an fsync per query."""
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

    def journal(self, run_id: str, after: int = 0, limit: int = 100) -> list[Event]:
        rows = self._read(q.RUN_EVENTS, (run_id, after, limit))
        return [row_event(r) for r in rows]

    def recent(self, run_id: str, limit: int = 40) -> list[Event]:
        """The run's last ``limit`` events, oldest first."""
        rows = self._read(q.RUN_RECENT, (run_id, limit))
        return [row_event(r) for r in reversed(rows)]

    # -- the chain (bench_gate.store._chain)
    def journal_head(self) -> tuple[int, str]:
        with self._lock:
            try:
                return _head(self._db)
            except sqlite3.Error as exc:
                raise StoreError(f"store error: {exc}") from exc

    def chain(self, after: int = 0, limit: int = 1000) -> list[tuple[Any, ...]]:
        return self._read(q.CHAIN_PAGE, (after, limit))

    def segments(self) -> list[Segment]:
        return [row_segment(r) for r in self._read(q.SEGMENTS)]

    def record_archive(self, segment: Segment) -> bool:
        with self._tx() as db:
            first = db.execute(q.FIRST_LIVE).fetchone()
            if first is None or (int(first[0]), first[1]) != (segment.first_seq, segment.prev):
                return False  # archived by someone else meanwhile
            gone = db.execute(q.DROP_ARCHIVED, (segment.first_seq, segment.last_seq)).rowcount
            if gone != segment.events:
                raise StoreError(f"archiving seqs {segment.first_seq} to {segment.last_seq}: "
                                 f"{gone} events in the store, {segment.events} in the "
                                 "segment; nothing was archived")
            db.execute(q.SEGMENT_INSERT, (*segment.row()[:-1],
                                          segment.archived_at.isoformat()))
        return True

    # -- approved setpoints
    def get_setpoint(self, instrument: str, channel: int) -> dict[str, Any] | None:
        rows = self._read("SELECT data FROM setpoints WHERE instrument = ? AND channel = ?",
                          (instrument, channel))
        return dict(json.loads(rows[0][0])) if rows else None

    def put_setpoint(self, instrument: str, channel: int, data: dict[str, Any]) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO setpoints (instrument, channel, data) "
                       "VALUES (?, ?, ?)", (instrument, channel, json.dumps(data, default=str)))

    # -- small keyed tables (tokens, plans...)
    def kv_get(self, table: str, key: str) -> dict[str, Any] | None:
        rows = self._read("SELECT data FROM kv WHERE tbl = ? AND key = ?", (table, key))
        return dict(json.loads(rows[0][0])) if rows else None

    def kv_put(self, table: str, key: str, data: dict[str, Any]) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO kv (tbl, key, data) VALUES (?, ?, ?)",
                       (table, key, json.dumps(data, default=str)))

    def kv_list(self, table: str) -> list[dict[str, Any]]:
        rows = self._read("SELECT data FROM kv WHERE tbl = ? ORDER BY key", (table,))
        return [dict(json.loads(r[0])) for r in rows]

    def kv_items(self, table: str) -> list[tuple[str, dict[str, Any]]]:
        rows = self._read("SELECT key, data FROM kv WHERE tbl = ? ORDER BY key", (table,))
        return [(str(r[0]), dict(json.loads(r[1]))) for r in rows]

    def kv_delete(self, table: str, key: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM kv WHERE tbl = ? AND key = ?", (table, key))

    def notify(self, message: dict[str, Any]) -> None:
        """One SQLite file serves one gateway: there is nobody else to tell."""

    def listen(self, callback: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        return lambda: None

    def close(self) -> None:
        with self._lock, self._fast_lock:
            if self._fast is not self._db:
                self._fast.close()
            self._db.close()


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
