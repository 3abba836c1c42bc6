"""SQL both stores run as it is, written once with ``?`` placeholders (PostgreSQL's store
turns them into ``%s`` with :func:`pg`, at one boundary). Only the columns both schemas
share appear here; upserts are ``ON CONFLICT``, which SQLite has since 3.24 and
``RETURNING`` since 3.35."""

from __future__ import annotations

from typing import Any

from ..models import Status
from ._base import RequestSort

__all__ = ["CHAIN_HEAD", "CHAIN_MIGRATION", "CHAIN_PAGE", "DROP_ARCHIVED", "DUE", "FIRST_LIVE",
           "KV_DELETE", "KV_GET", "KV_ITEMS", "KV_LIST", "KV_PUT", "LAST_CHAINED",
           "LAST_SEGMENT", "LINK_UNCHAINED", "LISTED", "LISTED_UTF8", "MAX_ROWS", "OPEN_RUNS_OF",
           "PENDING_OF", "REQUEST", "REQUEST_BY_KEY", "REQUEST_EVENTS", "REQUEST_IDS",
           "REQUEST_INSERT", "REQUEST_SAVE", "RUN", "RUN_EVENTS",
           "RUN_INSERT", "RUN_PRINCIPAL", "RUN_RECENT", "RUN_SAVE", "SEGMENTS",
           "SEGMENT_INSERT", "SETPOINT_GET", "SETPOINT_PUT", "UNCHAINED", "UNFINISHED", "page",
           "pg", "rows", "runs"]

#: The order of each sort; ``id`` breaks ties, so pages never overlap or skip.
_ORDER = {RequestSort.NEWEST: "created_at DESC, id", RequestSort.EXPIRY: "expires_at, id"}

OPEN_RUNS_OF = "SELECT count(*) FROM runs WHERE principal = ? AND status <> 'closed'"
PENDING_OF = ("SELECT count(*), min(expires_at) FROM requests "
              "WHERE requester = ? AND status = 'pending'")
RUN_PRINCIPAL = "SELECT principal FROM runs WHERE id = ?"

# -- runs and requests (documents kept as JSON text; the columns queried on beside them)
RUN = "SELECT data FROM runs WHERE id = ?"
RUN_INSERT = ("INSERT INTO runs (id, created_at, principal, status, data) "
              "VALUES (?, ?, ?, ?, ?)")
RUN_SAVE = "UPDATE runs SET data = ?, status = ? WHERE id = ?"
REQUEST = "SELECT data FROM requests WHERE id = ?"
#: Ids that start with a prefix (``!`` escapes LIKE's wildcards in it), in order.
REQUEST_IDS = "SELECT id FROM requests WHERE id LIKE ? ESCAPE '!' ORDER BY id LIMIT ?"
REQUEST_BY_KEY = "SELECT data FROM requests WHERE run_id = ? AND idempotency_key = ?"
#: Returns no row when (run, idempotency key) is taken; PostgreSQL first waits for a
#: concurrent insert of the same key to commit.
REQUEST_INSERT = ("INSERT INTO requests (id, run_id, instrument, status, created_at, "
                  "expires_at, idempotency_key, version, requester, data, listed) "
                  "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                  "ON CONFLICT (run_id, idempotency_key) DO NOTHING RETURNING id")
#: Compare-and-swap on the version.
REQUEST_SAVE = ("UPDATE requests SET status = ?, version = ?, data = ?, listed = ? "
                "WHERE id = ? AND version = ?")
DUE = "SELECT data FROM requests WHERE status = 'pending' AND expires_at <= ?"
UNFINISHED = "SELECT data FROM requests WHERE status IN ('approved', 'executing')"
#: What a page reads: each request's list document (``bench_gate.listing``: what a list
#: shows of it, written beside it at every save), or, for a request saved before that
#: column existed, the whole document (read the same way).
LISTED = "coalesce(listed, data)"
#: ``LISTED`` as its UTF-8 bytes (SQLite): the JSON parser reads bytes as they are, and
#: making a ``str`` of each document first was a third of reading the rows (the arrow of
#: an action's words makes it a two-byte-per-character string).
LISTED_UTF8 = f"CAST({LISTED} AS BLOB)"

# -- approved setpoints and the small keyed tables
SETPOINT_GET = "SELECT data FROM setpoints WHERE instrument = ? AND channel = ?"
SETPOINT_PUT = ("INSERT INTO setpoints (instrument, channel, data) VALUES (?, ?, ?) "
                "ON CONFLICT (instrument, channel) DO UPDATE SET data = excluded.data")
KV_GET = "SELECT data FROM kv WHERE tbl = ? AND key = ?"
KV_PUT = ("INSERT INTO kv (tbl, key, data) VALUES (?, ?, ?) "
          "ON CONFLICT (tbl, key) DO UPDATE SET data = excluded.data")
KV_LIST = "SELECT data FROM kv WHERE tbl = ? ORDER BY key"
KV_ITEMS = "SELECT key, data FROM kv WHERE tbl = ? ORDER BY key"
KV_DELETE = "DELETE FROM kv WHERE tbl = ? AND key = ?"


#: The largest LIMIT or OFFSET a statement is given: a page past every row is empty, and
#: a number beyond a 64-bit integer (the console's ``?offset=`` of 30 nines) was a 500.
MAX_ROWS = 2**62


def rows(n: int) -> int:
    """``n`` as a LIMIT or OFFSET both backends take: 0 to ``MAX_ROWS``."""
    return min(max(0, n), MAX_ROWS)


def runs(principal: str | None, limit: int, offset: int) -> tuple[str, tuple[Any, ...]]:
    """A page of runs, newest first; ``principal`` filters before the page is cut."""
    where, args = ("", ()) if principal is None else (" WHERE principal = ?", (principal,))
    return (f"SELECT data FROM runs{where} ORDER BY created_at DESC, id LIMIT ? OFFSET ?",
            (*args, rows(limit), rows(offset)))


def page(status: Status | None, run_id: str | None, instrument: str | None,
         requester: str | None, sort: RequestSort | str, limit: int, offset: int,
         what: str = "data") -> tuple[str, tuple[Any, ...], str, tuple[Any, ...]]:
    """(the page's SELECT of ``what``, its arguments, the COUNT of every match, its
    arguments)."""
    order = _ORDER[RequestSort(sort)]
    where: list[str] = []
    args: list[Any] = []
    for column, value in (("status", status), ("run_id", run_id),
                          ("instrument", instrument)):
        if value is not None:
            where.append(f"{column} = ?")
            args.append(str(value))
    if requester is not None:
        where.append("requester = ?")
        args.append(requester)
    clause = (" WHERE " + " AND ".join(where)) if where else ""
    select = f"SELECT {what} FROM requests{clause} ORDER BY {order} LIMIT ? OFFSET ?"
    count = f"SELECT count(*) FROM requests{clause}"
    return select, (*args, rows(limit), rows(offset)), count, tuple(args)


def pg(sql: str) -> str:
    """The same statement with PostgreSQL's placeholders (no statement here holds a '?'
    of its own)."""
    return sql.replace("?", "%s")


# -- the journal's hash chain (bench_gate.store._chain)
_EVENT = "SELECT seq, run_id, request_id, type, at, data, prev, hash FROM journal"
#: The migration (a version number) that starts the chain: the store chains the events it
#: holds right after it, once.
CHAIN_MIGRATION = 4
#: PostgreSQL: the last seq and hash of the chain, which the next append locks and continues.
CHAIN_HEAD = "SELECT seq, hash FROM journal_head WHERE id = 1"
#: The newest event that has its hash, and the newest archived segment's end.
LAST_CHAINED = ("SELECT seq, hash FROM journal WHERE hash IS NOT NULL "
                "ORDER BY seq DESC LIMIT 1")
LAST_SEGMENT = "SELECT last_seq, last_hash FROM journal_segments ORDER BY first_seq DESC LIMIT 1"
#: The whole chain in seq order, a page at a time (``journal verify``).
CHAIN_PAGE = f"{_EVENT} WHERE seq > ? ORDER BY seq LIMIT ?"
#: One run's events, oldest first, a page at a time; and its last events.
RUN_EVENTS = f"{_EVENT} WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?"
RUN_RECENT = f"{_EVENT} WHERE run_id = ? ORDER BY seq DESC LIMIT ?"
#: One request's events of one type, oldest first (its approvals, checked before it runs).
REQUEST_EVENTS = f"{_EVENT} WHERE request_id = ? AND type = ? ORDER BY seq LIMIT ?"
#: Events journaled before the store had a chain (the migration chains them in seq order).
UNCHAINED = ("SELECT seq, run_id, request_id, type, at, data FROM journal "
             "WHERE hash IS NULL ORDER BY seq LIMIT ?")
LINK_UNCHAINED = "UPDATE journal SET prev = ?, hash = ? WHERE seq = ?"
#: The oldest event still in the store, which an archive must start at.
FIRST_LIVE = "SELECT seq, prev FROM journal ORDER BY seq LIMIT 1"
SEGMENTS = ("SELECT first_seq, last_seq, events, prev, last_hash, path, archived_at "
            "FROM journal_segments ORDER BY first_seq")
SEGMENT_INSERT = ("INSERT INTO journal_segments (first_seq, last_seq, events, prev, last_hash, "
                  "path, archived_at) VALUES (?, ?, ?, ?, ?, ?, ?)")
DROP_ARCHIVED = "DELETE FROM journal WHERE seq >= ? AND seq <= ?"
