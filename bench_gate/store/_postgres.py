"""PostgreSQL store: the same records and journal as the SQLite store, for several gateways
(benches) sharing one database.

- psycopg 3 (sync) behind a ``psycopg_pool.ConnectionPool``. Each method is one transaction,
  and every psycopg or pool error is translated into ``StoreError`` here, at one boundary.
- A lost connection costs no acknowledged write: a method returns only after its COMMIT, and
  the pool checks a connection before handing it out, so a dead one is replaced. While the
  database is down every call raises ``StoreError`` after at most ``pool_timeout`` seconds.
- The journal is one hash chain (``bench_gate.store._chain``) for every gateway on the
  database. An append locks the chain's head row (``SELECT ... FOR UPDATE``), numbers and
  hashes its events after it, inserts them and moves the head, in one transaction: appends
  are ordered, events commit in ``seq`` order, and a reader paging with ``after=seq`` never
  skips an event that commits later with a smaller number.
- Documents (runs, requests, event data, setpoints, kv) are JSON kept as TEXT, byte for byte
  what the SQLite store keeps; the columns queried on are real columns, times as TIMESTAMPTZ.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from ..errors import StoreError
from ..models import Event, Run, Status, TakeoverRequest
from . import _queries as q
from ._base import PendingCheck, RequestPage, RequestSort
from ._chain import Chain, Segment, backfill, row_event, row_segment, with_meanings
from ._sqlite import MIGRATIONS as SQLITE_MIGRATIONS

__all__ = ["MIGRATIONS", "PostgresStore"]

#: The LISTEN/NOTIFY channel gateways use to tell each other of changes.
CHANNEL = "bench_gate"
#: PostgreSQL refuses a NOTIFY payload of 8000 bytes or more.
NOTIFY_LIMIT = 7900

#: Each entry moves the schema one version up, entry for entry the same change as the SQLite
#: store's ``MIGRATIONS`` (same length, same order). Never edit a released entry: append.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE runs (
        id TEXT COLLATE "C" PRIMARY KEY,
        created_at TIMESTAMPTZ NOT NULL,
        data TEXT NOT NULL
    );
    CREATE TABLE requests (
        id TEXT COLLATE "C" PRIMARY KEY,
        run_id TEXT COLLATE "C" NOT NULL,
        instrument TEXT COLLATE "C" NOT NULL,
        status TEXT NOT NULL,
        created_at TIMESTAMPTZ NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL,
        idempotency_key TEXT COLLATE "C",
        version INTEGER NOT NULL,
        data TEXT NOT NULL,
        UNIQUE (run_id, idempotency_key)
    );
    CREATE INDEX requests_status ON requests (status, created_at);
    CREATE INDEX requests_run ON requests (run_id, created_at);
    CREATE TABLE journal (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_id TEXT COLLATE "C" NOT NULL,
        request_id TEXT COLLATE "C",
        type TEXT NOT NULL,
        at TIMESTAMPTZ NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX journal_run ON journal (run_id, seq);
    CREATE TABLE setpoints (
        instrument TEXT COLLATE "C" NOT NULL,
        channel INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (instrument, channel)
    );
    CREATE TABLE kv (
        tbl TEXT COLLATE "C" NOT NULL,
        key TEXT COLLATE "C" NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (tbl, key)
    );
    """,
    # 2: who owns a run and whether it is closed, as columns (per-requester quotas count
    # them); the queue sorted by expiry.
    """
    ALTER TABLE runs ADD COLUMN principal TEXT COLLATE "C";
    ALTER TABLE runs ADD COLUMN status TEXT;
    UPDATE runs SET principal = data::json->>'principal', status = data::json->>'status';
    CREATE INDEX runs_principal ON runs (principal, status);
    CREATE INDEX requests_expiry ON requests (status, expires_at);
    """,
    # 3: each request names its requester (its run's principal), so one requester's
    # pending requests are counted from an index, however many others wait.
    """
    ALTER TABLE requests ADD COLUMN requester TEXT COLLATE "C";
    UPDATE requests SET requester = runs.principal FROM runs WHERE runs.id = requests.run_id;
    CREATE INDEX requests_requester ON requests (requester, status, expires_at);
    """,
    # 4: the journal's hash chain (bench_gate.store._chain): each event's prev-hash and
    # hash; the head every append locks and continues; the archived segments. The store
    # then chains the events it holds, in seq order.
    """
    ALTER TABLE journal ADD COLUMN prev TEXT COLLATE "C";
    ALTER TABLE journal ADD COLUMN hash TEXT COLLATE "C";
    CREATE TABLE journal_head (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        seq BIGINT NOT NULL,
        hash TEXT COLLATE "C" NOT NULL
    );
    CREATE TABLE journal_segments (
        first_seq BIGINT PRIMARY KEY,
        last_seq BIGINT NOT NULL,
        events BIGINT NOT NULL,
        prev TEXT COLLATE "C" NOT NULL,
        last_hash TEXT COLLATE "C" NOT NULL,
        path TEXT NOT NULL,
        archived_at TIMESTAMPTZ NOT NULL
    );
    """,
)

if len(MIGRATIONS) != len(SQLITE_MIGRATIONS):  # pragma: no cover - a programming error
    raise RuntimeError(f"PostgreSQL has {len(MIGRATIONS)} migrations, SQLite "
                       f"{len(SQLITE_MIGRATIONS)}: every schema change needs both dialects")

#: Namespaces (first key) of the two-key advisory locks this store takes.
_LOCK_MIGRATE = 0x62670001
_LOCK_QUOTA = 0x62670003
_LOCK_ARCHIVE = 0x62670004

_SCHEMA_VERSION_TABLE = """
    CREATE TABLE IF NOT EXISTS schema_version (
        version INTEGER PRIMARY KEY,
        applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
    )
"""

Pool = ConnectionPool[psycopg.Connection[TupleRow]]


def describe(url: str) -> str:
    """``host:port/dbname`` of a connection URL, without user or password, for messages."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        return "(unparsable URL)"
    host = params.get("host") or params.get("hostaddr") or "localhost"
    return f"{host}:{params.get('port') or 5432}/{params.get('dbname') or '?'}"


def _lock_key(run_id: str) -> int:
    """A signed 32-bit key for a run's journal lock (a collision only serializes more)."""
    digest = hashlib.blake2b(run_id.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


class PostgresStore:
    """The store on PostgreSQL, opened by ``open_store("postgresql://...")``."""

    def __init__(self, url: str, *, pool_min: int = 1, pool_max: int = 10,
                 pool_timeout: float = 5.0, connect_timeout: int = 3,
                 statement_timeout: float = 15.0) -> None:
        self.url = url
        self.where = describe(url)
        self.pool_timeout = pool_timeout
        try:
            params = conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise StoreError(f"not a PostgreSQL URL: {self.where}: {exc}") from exc
        options = " ".join(filter(None, [
            str(params.get("options") or ""), "-c TimeZone=UTC",
            f"-c statement_timeout={int(statement_timeout * 1000)}",
            f"-c lock_timeout={int(statement_timeout * 1000)}",
        ]))
        kwargs: dict[str, Any] = {
            "connect_timeout": max(2, connect_timeout),  # libpq's minimum is 2 s
            "options": options,
            # A peer that vanishes without a reset (cable, VM gone) fails within seconds.
            "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2,
            "keepalives_count": 2, "tcp_user_timeout": int(connect_timeout * 1000 + 5000),
        }
        self.last_connect_error = ""
        self._connect_kwargs = kwargs
        self.pending_check: PendingCheck | None = None
        store = self

        class _Connection(psycopg.Connection[TupleRow]):
            """Remembers why the last connection attempt failed, for StoreError's message."""

            @classmethod
            def connect(cls, *args: Any, **kw: Any) -> Any:
                try:
                    conn = super().connect(*args, **kw)
                except psycopg.Error as exc:
                    store.last_connect_error = " ".join(str(exc).split())
                    raise
                store.last_connect_error = ""
                return conn

        try:
            self._pool: Pool = ConnectionPool(
                url, connection_class=_Connection, kwargs=kwargs, min_size=pool_min,
                max_size=pool_max,
                timeout=pool_timeout, open=True, name=f"bench-gate {self.where}",
                check=ConnectionPool.check_connection,
                # Give up a background reconnection soon: the next call starts a fresh one,
                # so the pool is back within seconds of the database.
                reconnect_timeout=max(2.0, pool_timeout * 2),
            )
        except psycopg.Error as exc:
            raise StoreError(f"cannot open the PostgreSQL store {self.where}: {exc}") from exc
        try:
            self.migrate()
        except BaseException:
            self._pool.close(timeout=1.0)
            raise

    # -- the one boundary where psycopg errors become StoreError
    def _error(self, exc: psycopg.Error) -> StoreError:
        if isinstance(exc, PoolClosed):
            return StoreError(f"the PostgreSQL store {self.where} is closed")
        if isinstance(exc, PoolTimeout):
            why = self.last_connect_error or "is the database running and reachable?"
            return StoreError(f"the PostgreSQL store {self.where} is unavailable: no "
                              f"connection within {self.pool_timeout:g} s ({why})")
        if isinstance(exc, psycopg.OperationalError):
            return StoreError(f"lost the PostgreSQL store {self.where}: {exc}; "
                              "nothing from this call was acknowledged")
        return StoreError(f"store error ({self.where}): {exc}")

    @contextmanager
    def _tx(self) -> Iterator[psycopg.Cursor[TupleRow]]:
        """One transaction: committed when the block ends, rolled back if it raises."""
        try:
            with self._pool.connection() as conn, conn.cursor() as cur:
                yield cur
        except psycopg.Error as exc:
            raise self._error(exc) from exc

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[TupleRow]:
        with self._tx() as cur:
            cur.execute(sql, args)
            return cur.fetchall()

    # -- schema
    def schema_version(self) -> int:
        rows = self._read("SELECT coalesce(max(version), 0) FROM schema_version")
        return int(rows[0][0])

    def migrate(self) -> None:
        """Bring the schema to ``len(MIGRATIONS)``; one gateway at a time, all or nothing."""
        with self._tx() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_LOCK_MIGRATE,))
            cur.execute(_SCHEMA_VERSION_TABLE)
            cur.execute("SELECT coalesce(max(version), 0) FROM schema_version")
            row = cur.fetchone()
            version = int(row[0]) if row else 0
            if version > len(MIGRATIONS):
                raise StoreError(f"the store's schema v{version} is newer than this "
                                 f"gateway's v{len(MIGRATIONS)}")
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                cur.execute(script)
                cur.execute("INSERT INTO schema_version (version) VALUES (%s)", (number,))

            if version < q.CHAIN_MIGRATION <= len(MIGRATIONS):
                def execute(sql: str, args: tuple[Any, ...]) -> list[TupleRow]:
                    cur.execute(q.pg(sql), args)
                    return cur.fetchall() if cur.description else []
                cur.execute("INSERT INTO journal_head (id, seq, hash) VALUES (1, %s, %s)",
                            backfill(execute))

    # -- runs
    def create_run(self, run: Run, events: list[Event]) -> None:
        with self._tx() as cur:
            cur.execute("INSERT INTO runs (id, created_at, principal, status, data) "
                        "VALUES (%s, %s, %s, %s, %s)",
                        (run.id, run.created_at, run.principal, run.status.value,
                         run.model_dump_json()))
            self._append(cur, events)

    def save_run(self, run: Run, events: list[Event]) -> None:
        with self._tx() as cur:
            cur.execute("UPDATE runs SET data = %s, status = %s WHERE id = %s",
                        (run.model_dump_json(), run.status.value, run.id))
            self._append(cur, events)

    def get_run(self, run_id: str) -> Run | None:
        rows = self._read("SELECT data FROM runs WHERE id = %s", (run_id,))
        return Run.model_validate_json(rows[0][0]) if rows else None

    def list_runs(self, limit: int = 100, offset: int = 0, principal: str | None = None
                  ) -> list[Run]:
        if principal is None:
            rows = self._read("SELECT data FROM runs ORDER BY created_at DESC, id "
                              "LIMIT %s OFFSET %s", (limit, offset))
        else:  # filtered in the query, before the page is cut
            rows = self._read("SELECT data FROM runs WHERE principal = %s "
                              "ORDER BY created_at DESC, id LIMIT %s OFFSET %s",
                              (principal, limit, offset))
        return [Run.model_validate_json(r[0]) for r in rows]

    # -- requests
    def create_request(self, req: TakeoverRequest, events: list[Event]) -> TakeoverRequest:
        with self._tx() as cur:
            cur.execute(q.pg(q.RUN_PRINCIPAL), (req.run_id,))
            row = cur.fetchone()
            requester = str(row[0]) if row and row[0] is not None else None
            self._admit(cur, req, requester)
            # ON CONFLICT waits for a concurrent insert of the same key, then yields to it.
            cur.execute(
                "INSERT INTO requests (id, run_id, instrument, status, created_at, expires_at,"
                " idempotency_key, version, requester, data) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (run_id, idempotency_key) DO NOTHING RETURNING id",
                (req.id, req.run_id, req.instrument, req.status.value, req.created_at,
                 req.expires_at, req.idempotency_key, req.version, requester,
                 req.model_dump_json()))
            if cur.fetchone() is None:
                cur.execute("SELECT data FROM requests WHERE run_id = %s "
                            "AND idempotency_key = %s", (req.run_id, req.idempotency_key))
                row = cur.fetchone()
                if row is None:  # pragma: no cover - the conflicting row cannot vanish
                    raise StoreError(f"request {req.id}: idempotency conflict with no row")
                return TakeoverRequest.model_validate_json(row[0])
            self._append(cur, events)
        return req

    def _admit(self, cur: psycopg.Cursor[TupleRow], req: TakeoverRequest,
               requester: str | None) -> None:
        """The pending-request quota, inside the inserting transaction: a lock per requester
        (held to the commit) makes concurrent inserts, from any gateway, count one by one."""
        check = self.pending_check
        if check is None or requester is None or req.status is not Status.PENDING \
                or req.supersedes is not None:
            return  # a stale request's fresh replacement is no new filing

        def count() -> tuple[int, datetime | None]:
            cur.execute("SELECT pg_advisory_xact_lock(%s, %s)",
                        (_LOCK_QUOTA, _lock_key(str(requester))))
            cur.execute(q.pg(q.PENDING_OF), (requester,))
            found = cur.fetchone()
            return (int(found[0]), found[1]) if found else (0, None)
        check(requester, count)

    def save_request(self, req: TakeoverRequest, expected_version: int,
                     events: list[Event]) -> bool:
        req.version = expected_version + 1
        try:
            with self._tx() as cur:
                cur.execute(
                    "UPDATE requests SET status = %s, version = %s, data = %s "
                    "WHERE id = %s AND version = %s",
                    (req.status.value, req.version, req.model_dump_json(), req.id,
                     expected_version))
                if cur.rowcount != 1:
                    req.version = expected_version
                    return False
                self._append(cur, with_meanings(req, events))
        except BaseException:
            req.version = expected_version
            raise
        return True

    def get_request(self, request_id: str) -> TakeoverRequest | None:
        rows = self._read("SELECT data FROM requests WHERE id = %s", (request_id,))
        return TakeoverRequest.model_validate_json(rows[0][0]) if rows else None

    def find_request(self, run_id: str, idempotency_key: str) -> TakeoverRequest | None:
        rows = self._read("SELECT data FROM requests WHERE run_id = %s "
                          "AND idempotency_key = %s", (run_id, idempotency_key))
        return TakeoverRequest.model_validate_json(rows[0][0]) if rows else None

    def list_requests(self, status: Status | None = None, run_id: str | None = None,
                      instrument: str | None = None, limit: int = 100,
                      offset: int = 0) -> list[TakeoverRequest]:
        sql, args, _, _ = q.page(status, run_id, instrument, None, RequestSort.NEWEST,
                                 limit, offset)
        return [TakeoverRequest.model_validate_json(r[0])
                for r in self._read(q.pg(sql), args)]

    def page_requests(self, status: Status | None = None, run_id: str | None = None,
                      instrument: str | None = None, limit: int = 100, offset: int = 0,
                      sort: RequestSort | str = RequestSort.NEWEST,
                      requester: str | None = None) -> RequestPage:
        sort = RequestSort(sort)
        sql, args, count_sql, count_args = q.page(status, run_id, instrument, requester,
                                                  sort, limit, offset)
        with self._tx() as cur:  # one snapshot for the page and its total
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            cur.execute(q.pg(sql), args)
            rows = cur.fetchall()
            cur.execute(q.pg(count_sql), count_args)
            counted = cur.fetchone()
        return RequestPage((TakeoverRequest.model_validate_json(r[0]) for r in rows),
                           int(counted[0]) if counted else 0, limit=limit, offset=offset,
                           order=sort)

    def pending_of(self, principal: str) -> tuple[int, datetime | None]:
        row = self._read(q.pg(q.PENDING_OF), (principal,))[0]
        return int(row[0]), row[1]

    def open_runs_of(self, principal: str) -> int:
        return int(self._read(q.pg(q.OPEN_RUNS_OF), (principal,))[0][0])

    def due_for_expiry(self, at_iso: str) -> list[TakeoverRequest]:
        try:
            at = datetime.fromisoformat(at_iso)
        except ValueError as exc:
            raise StoreError(f"due_for_expiry expects an ISO 8601 time, got {at_iso!r}") \
                from exc
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        rows = self._read("SELECT data FROM requests WHERE status = 'pending' "
                          "AND expires_at <= %s", (at,))
        return [TakeoverRequest.model_validate_json(r[0]) for r in rows]

    def unfinished(self) -> list[TakeoverRequest]:
        rows = self._read("SELECT data FROM requests "
                          "WHERE status IN ('approved', 'executing')")
        return [TakeoverRequest.model_validate_json(r[0]) for r in rows]

    # -- journal
    def _append(self, cur: psycopg.Cursor[TupleRow], events: list[Event]) -> None:
        """Chain and insert ``events``: the head row stays locked until the commit, so every
        gateway's appends form one chain, committed in seq order. Always the last thing a
        transaction does (nothing is locked after the head: no deadlock)."""
        if not events:
            return
        cur.execute(q.pg(q.CHAIN_HEAD) + " FOR UPDATE")
        head = cur.fetchone()
        if head is None:  # pragma: no cover - the migration creates it
            raise StoreError(f"the journal of {self.where} has no chain head")
        rows = Chain.extend(events, int(head[0]), str(head[1]))
        values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s)"] * len(rows))
        cur.execute(
            "WITH added AS (INSERT INTO journal (seq, run_id, request_id, type, at, data, "
            f"prev, hash) OVERRIDING SYSTEM VALUE VALUES {values} RETURNING 1) "
            "UPDATE journal_head SET seq = %s, hash = %s WHERE id = 1",
            (*(a for row, ev in zip(rows, events, strict=True)
               for a in (*row[:4], ev.at, *row[5:])), events[-1].seq, events[-1].hash))

    def append(self, events: list[Event], durable: bool = True) -> list[Event]:
        with self._tx() as cur:
            if not durable:  # reads: committed, but without waiting for the WAL flush
                cur.execute("SET LOCAL synchronous_commit TO OFF")
            self._append(cur, events)
        return events

    def journal(self, run_id: str, after: int = 0, limit: int = 100) -> list[Event]:
        rows = self._read(q.pg(q.RUN_EVENTS), (run_id, after, limit))
        return [row_event(r) for r in rows]

    def recent(self, run_id: str, limit: int = 40) -> list[Event]:
        """The run's last ``limit`` events, oldest first."""
        rows = self._read(q.pg(q.RUN_RECENT), (run_id, limit))
        return [row_event(r) for r in reversed(rows)]

    # -- the chain (bench_gate.store._chain)
    def journal_head(self) -> tuple[int, str]:
        row = self._read(q.pg(q.CHAIN_HEAD))[0]
        return int(row[0]), str(row[1])

    def chain(self, after: int = 0, limit: int = 1000) -> list[tuple[Any, ...]]:
        return self._read(q.pg(q.CHAIN_PAGE), (after, limit))

    def segments(self) -> list[Segment]:
        return [row_segment(r) for r in self._read(q.pg(q.SEGMENTS))]

    def record_archive(self, segment: Segment) -> bool:
        with self._tx() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_LOCK_ARCHIVE,))
            cur.execute(q.pg(q.FIRST_LIVE))
            first = cur.fetchone()
            if first is None or (int(first[0]), first[1]) != (segment.first_seq, segment.prev):
                return False  # archived by someone else meanwhile
            cur.execute(q.pg(q.DROP_ARCHIVED), (segment.first_seq, segment.last_seq))
            if cur.rowcount != segment.events:
                raise StoreError(f"archiving seqs {segment.first_seq} to {segment.last_seq}: "
                                 f"{cur.rowcount} events in the store, {segment.events} in "
                                 "the segment; nothing was archived")
            cur.execute(q.pg(q.SEGMENT_INSERT), segment.row())
        return True

    # -- approved setpoints
    def get_setpoint(self, instrument: str, channel: int) -> dict[str, Any] | None:
        rows = self._read("SELECT data FROM setpoints WHERE instrument = %s AND channel = %s",
                          (instrument, channel))
        return dict(json.loads(rows[0][0])) if rows else None

    def put_setpoint(self, instrument: str, channel: int, data: dict[str, Any]) -> None:
        with self._tx() as cur:
            cur.execute("INSERT INTO setpoints (instrument, channel, data) VALUES (%s, %s, %s) "
                        "ON CONFLICT (instrument, channel) DO UPDATE SET data = EXCLUDED.data",
                        (instrument, channel, json.dumps(data, default=str)))

    # -- small keyed tables (tokens, plans...)
    def kv_get(self, table: str, key: str) -> dict[str, Any] | None:
        rows = self._read("SELECT data FROM kv WHERE tbl = %s AND key = %s", (table, key))
        return dict(json.loads(rows[0][0])) if rows else None

    def kv_put(self, table: str, key: str, data: dict[str, Any]) -> None:
        with self._tx() as cur:
            cur.execute("INSERT INTO kv (tbl, key, data) VALUES (%s, %s, %s) "
                        "ON CONFLICT (tbl, key) DO UPDATE SET data = EXCLUDED.data",
                        (table, key, json.dumps(data, default=str)))

    def kv_list(self, table: str) -> list[dict[str, Any]]:
        rows = self._read("SELECT data FROM kv WHERE tbl = %s ORDER BY key", (table,))
        return [dict(json.loads(r[0])) for r in rows]

    def kv_items(self, table: str) -> list[tuple[str, dict[str, Any]]]:
        rows = self._read("SELECT key, data FROM kv WHERE tbl = %s ORDER BY key", (table,))
        return [(str(r[0]), dict(json.loads(r[1]))) for r in rows]

    def kv_delete(self, table: str, key: str) -> None:
        with self._tx() as cur:
            cur.execute("DELETE FROM kv WHERE tbl = %s AND key = %s", (table, key))

    # -- notifications between gateways sharing the database
    def notify(self, message: dict[str, Any]) -> None:
        payload = json.dumps(message, default=str, separators=(",", ":"))
        if len(payload.encode()) >= NOTIFY_LIMIT:
            return  # too big to announce; the others' periodic scan still finds the change
        with self._tx() as cur:
            cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))

    def listen(self, callback: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """LISTEN on its own connection in a daemon thread, reconnecting after a loss."""
        stop = threading.Event()

        def run() -> None:
            while not stop.is_set():
                try:
                    with psycopg.connect(self.url, autocommit=True,
                                         **self._connect_kwargs) as conn:
                        conn.execute(f"LISTEN {CHANNEL}")
                        while not stop.is_set():
                            for note in conn.notifies(timeout=0.5):
                                try:
                                    message = json.loads(note.payload)
                                except ValueError:
                                    continue
                                if isinstance(message, dict):
                                    callback(message)
                except psycopg.Error:
                    stop.wait(1.0)  # the database is away; the gateways' scans cover the gap

        thread = threading.Thread(target=run, name="bench-gate-listen", daemon=True)
        thread.start()

        def unlisten() -> None:
            stop.set()
            thread.join(timeout=3)
        return unlisten

    def close(self) -> None:
        self._pool.close(timeout=2.0)

