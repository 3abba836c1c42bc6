"""PostgreSQL store: the same records and journal as the SQLite store, for several gateways
(benches) sharing one database.

- psycopg 3 (sync) behind a ``psycopg_pool.ConnectionPool``. Each method is one transaction,
  and every psycopg or pool error is translated into ``StoreError`` here, at one boundary.
- A lost connection costs no acknowledged write: a method returns only after its COMMIT, and
  the pool checks a connection before handing it out, so a dead one is replaced. A call
  waits at most ``pool_timeout`` seconds for a connection, and once a connection attempt
  has failed (the database is down) only ``DOWN_WAIT``: the gateway calls the store on its
  event loop, and a call waiting there held up everything else, an emergency stop too.
- The journal is one hash chain (``bench_gate.store._chain``) for every gateway on the
  database. An append locks the chain's head row (``SELECT ... FOR UPDATE``), numbers and
  hashes its events after it, inserts them and moves the head, in one transaction: appends
  are ordered, events commit in ``seq`` order, and a reader paging with ``after=seq`` never
  skips an event that commits later with a smaller number.
- Documents (runs, requests, event data, setpoints, kv) are JSON kept as TEXT, byte for byte
  what the SQLite store keeps; the columns queried on are real columns, times as TIMESTAMPTZ.
  The schema's migrations are in ``_pg_schema.py``.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from ..errors import InvalidInput, StoreError
from ..models import Event
from . import _queries as q
from ._base import PendingCheck
from ._chain import Chain, backfill
from ._pg_schema import MIGRATIONS
from ._readlog import READ_LOG_TABLE, Row, chained
from ._sql import SqlStore, Tx

__all__ = ["MIGRATIONS", "PostgresStore"]

#: The LISTEN/NOTIFY channel gateways use to tell each other of changes.
CHANNEL = "bench_gate"
#: PostgreSQL refuses a NOTIFY payload of 8000 bytes or more.
NOTIFY_LIMIT = 7900

#: Namespaces (first key) of the two-key advisory locks this store takes.
_LOCK_MIGRATE = 0x62670001
_LOCK_QUOTA = 0x62670003
_LOCK_ARCHIVE = 0x62670004

#: How long a call waits for a connection while the last connection attempt failed, and
#: how often a longer wait looks whether one has failed meanwhile.
DOWN_WAIT = 0.1

_SCHEMA_VERSION_TABLE = """
    CREATE TABLE IF NOT EXISTS schema_version (
        version INTEGER PRIMARY KEY,
        applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
    )
"""

Pool = ConnectionPool[psycopg.Connection[TupleRow]]


class _PgTx:
    """A transaction's cursor that takes the shared statements' ``?`` placeholders: the one
    place they become PostgreSQL's ``%s``."""

    __slots__ = ("_cur",)

    def __init__(self, cur: psycopg.Cursor[TupleRow]) -> None:
        self._cur = cur

    def execute(self, sql: str, args: Any = (), /) -> psycopg.Cursor[TupleRow]:
        if any(isinstance(a, str) and "\x00" in a for a in args):
            args = _unkept(sql, args)
        # No arguments, no placeholders: a script of several statements (a migration)
        # goes by the simple query protocol.
        return self._cur.execute(q.pg(sql), args) if args else self._cur.execute(sql)


def _unkept(sql: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """PostgreSQL's text holds no NUL character (SQLite's does), and psycopg refuses to
    send one: a lookup by such a value (an id in a URL, ``a%00b``) was a 503. No stored
    value holds one, so it matches none: compared as NULL, it finds nothing (every
    comparison of a caller's text is ``=`` or ``LIKE``). Kept, it is refused (422)."""
    if not sql.lstrip().upper().startswith(("SELECT", "DELETE")):
        raise InvalidInput("a text holding a NUL character (\\u0000) cannot be kept in the "
                           "PostgreSQL store")
    return tuple(None if isinstance(a, str) and "\x00" in a else a for a in args)


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


class PostgresStore(SqlStore):
    """The store on PostgreSQL, opened by ``open_store("postgresql://...")``."""

    _clock_sql = "SELECT extract(epoch FROM clock_timestamp())"

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
            if self.last_connect_error:
                return StoreError(f"the PostgreSQL store {self.where} is unavailable "
                                  f"({self.last_connect_error})")
            return StoreError(f"the PostgreSQL store {self.where} is unavailable: no "
                              f"connection within {self.pool_timeout:g} s (is the "
                              "database running and reachable?)")
        if isinstance(exc, psycopg.OperationalError):
            return StoreError(f"lost the PostgreSQL store {self.where}: {exc}; "
                              "nothing from this call was acknowledged")
        return StoreError(f"store error ({self.where}): {exc}")

    @contextmanager
    def _tx(self) -> Iterator[_PgTx]:
        """One transaction: committed when the block ends, rolled back if it raises."""
        try:
            conn = self._connection()
            try:
                with conn, conn.cursor() as cur:
                    yield _PgTx(cur)
            finally:
                self._pool.putconn(conn)
        except psycopg.Error as exc:
            raise self._error(exc) from exc

    def _connection(self) -> psycopg.Connection[TupleRow]:
        """A connection from the pool, within ``pool_timeout``; at once, or a PoolTimeout
        as soon as a connection attempt has failed (the database is away)."""
        deadline = time.monotonic() + self.pool_timeout
        while True:
            left = deadline - time.monotonic()
            try:
                return self._pool.getconn(timeout=max(0.01, min(DOWN_WAIT, left)))
            except PoolTimeout:
                if self.last_connect_error or time.monotonic() >= deadline:
                    raise

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[TupleRow]:
        with self._tx() as cx:
            return cx.execute(sql, args).fetchall()

    # -- schema
    def schema_version(self) -> int:
        rows = self._read("SELECT coalesce(max(version), 0) FROM schema_version")
        return int(rows[0][0])

    def migrate(self) -> None:
        """Bring the schema to ``len(MIGRATIONS)``; one gateway at a time, all or nothing."""
        with self._tx() as cx:
            cx.execute("SELECT pg_advisory_xact_lock(?, 0)", (_LOCK_MIGRATE,))
            cx.execute(_SCHEMA_VERSION_TABLE)
            row = cx.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()
            version = int(row[0]) if row else 0
            if version > len(MIGRATIONS):
                raise StoreError(f"the store's schema v{version} is newer than this "
                                 f"gateway's v{len(MIGRATIONS)}")
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                cx.execute(script)
                cx.execute("INSERT INTO schema_version (version) VALUES (?)", (number,))

            if version < q.CHAIN_MIGRATION <= len(MIGRATIONS):
                def execute(sql: str, args: tuple[Any, ...]) -> list[TupleRow]:
                    cur = cx.execute(sql, args)
                    return cur.fetchall() if cur.description else []
                cx.execute("INSERT INTO journal_head (id, seq, hash) VALUES (1, ?, ?)",
                           backfill(execute))

    def _time(self, at: datetime) -> datetime:
        return at

    def _read_together(self, *queries: tuple[str, tuple[Any, ...]]) -> list[list[TupleRow]]:
        with self._tx() as cx:  # one snapshot for all of them
            cx.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            return [cx.execute(sql, args).fetchall() for sql, args in queries]

    def _lock_requester(self, cx: Tx, requester: str) -> None:
        # Held to the commit: concurrent inserts, from any gateway, count one by one.
        cx.execute("SELECT pg_advisory_xact_lock(?, ?)", (_LOCK_QUOTA, _lock_key(requester)))

    def _lock_archive(self, cx: Tx) -> None:
        cx.execute("SELECT pg_advisory_xact_lock(?, 0)", (_LOCK_ARCHIVE,))

    # -- journal
    def _append(self, cx: Tx, events: list[Event]) -> None:
        """Chain and insert ``events``: the head row stays locked until the commit, so every
        gateway's appends form one chain, committed in seq order. Always the last thing a
        transaction does (nothing is locked after the head: no deadlock)."""
        if events:
            self._insert(cx, lambda seq, prev: Chain.extend(events, seq, prev))

    def _insert(self, cx: Tx, chain: Callable[[int, str], list[tuple[Any, ...]]]) -> None:
        """Lock the head, insert the rows ``chain`` numbers and hashes after it, move it."""
        head = cx.execute(q.CHAIN_HEAD + " FOR UPDATE").fetchone()
        if head is None:  # pragma: no cover - the migration creates it
            raise StoreError(f"the journal of {self.where} has no chain head")
        rows = chain(int(head[0]), str(head[1]))
        values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?)"] * len(rows))
        cx.execute(
            "WITH added AS (INSERT INTO journal (seq, run_id, request_id, type, at, data, "
            f"prev, hash) OVERRIDING SYSTEM VALUE VALUES {values} RETURNING 1) "
            "UPDATE journal_head SET seq = ?, hash = ? WHERE id = 1",
            (*(a for row in rows
               for a in (*row[:4], datetime.fromisoformat(row[4]), *row[5:])),
             rows[-1][0], rows[-1][7]))

    def append(self, events: list[Event], durable: bool = True) -> list[Event]:
        if events:
            self.fold_reads()
        with self._tx() as cx:
            if not durable:  # reads: committed, but without waiting for the WAL flush
                cx.execute("SET LOCAL synchronous_commit TO OFF")
            self._append(cx, events)
        return events

    def fold_rows(self, rows: list[Row], log_id: str, upto: int) -> None:
        with self._tx() as cx:  # committed, without waiting for the WAL flush (as reads were)
            cx.execute("SET LOCAL synchronous_commit TO OFF")
            cx.execute(q.KV_PUT, (READ_LOG_TABLE, log_id, json.dumps({"lsn": upto})))
            self._insert(cx, lambda seq, prev: chained(rows, seq, prev))  # last: the head

    # -- the chain (bench_gate.store._chain)
    def journal_head(self) -> tuple[int, str]:
        self.fold_reads()
        row = self._read(q.CHAIN_HEAD)[0]
        return int(row[0]), str(row[1])

    # -- notifications between gateways sharing the database
    def notify(self, message: dict[str, Any]) -> None:
        payload = json.dumps(message, default=str, separators=(",", ":"))
        if len(payload.encode()) >= NOTIFY_LIMIT:
            return  # too big to announce; the others' periodic scan still finds the change
        with self._tx() as cx:
            cx.execute("SELECT pg_notify(?, ?)", (CHANNEL, payload))

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

