"""SQL both stores run as it is, written once with ``?`` placeholders (PostgreSQL's store
turns them into ``%s`` with :func:`pg`). Only the columns both schemas share appear here."""

from __future__ import annotations

from typing import Any

from ..models import Status
from ._base import RequestSort

__all__ = ["OPEN_RUNS_OF", "PENDING_OF", "RUN_PRINCIPAL", "page", "pg"]

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
