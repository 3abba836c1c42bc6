"""SQL both stores run as it is, written once with ``?`` placeholders (PostgreSQL's store
turns them into ``%s`` with :func:`pg`). Only the columns both schemas share appear here."""

from __future__ import annotations

from typing import Any

from ..models import Status
from ._base import RequestSort

__all__ = ["CHAIN_HEAD", "CHAIN_MIGRATION", "CHAIN_PAGE", "DROP_ARCHIVED", "FIRST_LIVE",
           "LAST_CHAINED", "LAST_SEGMENT", "LINK_UNCHAINED",
           "OPEN_RUNS_OF", "PENDING_OF", "RUN_EVENTS", "RUN_PRINCIPAL", "RUN_RECENT",
           "SEGMENTS", "SEGMENT_INSERT", "UNCHAINED", "page", "pg"]

#: The order of each sort; ``id`` breaks ties, so pages never overlap or skip.
_ORDER = {RequestSort.NEWEST: "created_at DESC, id", RequestSort.EXPIRY: "expires_at, id"}

OPEN_RUNS_OF = "SELECT count(*) FROM runs WHERE principal = ? AND status <> 'closed'"
PENDING_OF = ("SELECT count(*), min(expires_at) FROM requests "
              "WHERE requester = ? AND status = 'pending'")
RUN_PRINCIPAL = "SELECT principal FROM runs WHERE id = ?"


def page(status: Status | None, run_id: str | None, instrument: str | None,
         requester: str | None, sort: RequestSort | str, limit: int, offset: int
         ) -> tuple[str, tuple[Any, ...], str, tuple[Any, ...]]:
    """(the page's SELECT, its arguments, the COUNT of every match, its arguments)."""
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
    select = f"SELECT data FROM requests{clause} ORDER BY {order} LIMIT ? OFFSET ?"
    count = f"SELECT count(*) FROM requests{clause}"
    return select, (*args, limit, offset), count, tuple(args)


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
