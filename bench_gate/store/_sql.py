"""What both SQL stores do the same way, written once over the statements of
``_queries.py``: runs, requests, setpoints, kv, the journal's reads and archiving.

A dialect (``_sqlite.py``, ``_postgres.py``) supplies only what truly differs: its
connection and transaction (:meth:`SqlStore._tx` yields a :class:`Tx` that takes ``?``
placeholders), migrations, the journal's append and head, how a time is stored, and the
locks PostgreSQL needs where SQLite's one writer already serializes.
"""

from __future__ import annotations

import abc
import json
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, Protocol

from ..errors import StoreError
from ..listing import listed_document, summaries
from ..models import Event, Run, Status, TakeoverRequest
from . import _queries as q
from ._base import PendingCheck, RequestPage, RequestSort
from ._chain import Segment, row_event, row_segment
from ._meanings import with_meanings
from ._readlog import READ_LOG_TABLE, ReadLog, Row, events_of

__all__ = ["Cursor", "SqlStore", "Tx"]

#: Read-log records folded in one transaction at most.
FOLD_RECORDS = 512


class Cursor(Protocol):
    """What a statement gives back (``sqlite3.Cursor``, ``psycopg.Cursor``)."""

    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


class Tx(Protocol):
    """One open transaction: runs a statement with ``?`` placeholders."""

    def execute(self, sql: str, args: Any = (), /) -> Cursor: ...


def _request(row: Any) -> TakeoverRequest:
    return TakeoverRequest.model_validate_json(row[0])


def _whole(req: TakeoverRequest) -> None:
    """Only a whole request is stored: a listed one (``RequestSummary``) lacks most of the
    request, and storing it would erase the rest."""
    if type(req) is not TakeoverRequest:
        raise StoreError(f"request {getattr(req, 'id', '?')} was read from a list, with "
                         "only part of the request; read it whole (get_request) before "
                         "saving it")


def _when(value: Any) -> datetime | None:
    """A stored time: SQLite keeps ISO 8601 text, PostgreSQL gives a datetime."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


class SqlStore(abc.ABC):
    """The :class:`~bench_gate.store.Store` methods both dialects share."""

    pending_check: PendingCheck | None
    #: What a page reads of each request: its list document, as text or UTF-8 bytes.
    _listed = q.LISTED

    # -- what a dialect supplies
    @abc.abstractmethod
    def _tx(self) -> AbstractContextManager[Tx]:
        """One write transaction: committed when the block ends, rolled back if it raises."""

    @abc.abstractmethod
    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]: ...

    @abc.abstractmethod
    def _read_together(self, *queries: tuple[str, tuple[Any, ...]]) -> list[list[Any]]:
        """Several SELECTs that see the same moment."""

    @abc.abstractmethod
    def _append(self, cx: Tx, events: list[Event]) -> None:
        """Chain and insert ``events`` in ``cx``'s transaction (always its last step)."""

    @abc.abstractmethod
    def append(self, events: list[Event], durable: bool = True) -> list[Event]: ...

    @abc.abstractmethod
    def fold_rows(self, rows: list[Row], log_id: str, upto: int) -> None:
        """Chain and insert ``rows`` (the read log's records up to number ``upto``) and
        mark them folded for ``log_id``, in one transaction that does not wait for the
        disk."""

    @abc.abstractmethod
    def _time(self, at: datetime) -> Any:
        """``at`` as the dialect stores it."""

    @abc.abstractmethod
    def _lock_requester(self, cx: Tx, requester: str) -> None:
        """Serialize counting ``requester``'s pending requests in ``cx``."""

    @abc.abstractmethod
    def _lock_archive(self, cx: Tx) -> None:
        """Serialize archivers in ``cx``."""

    # -- the read log (bench_gate.store._readlog): reads journaled before anything after them
    _reads: ReadLog | None = None

    def attach_reads(self, log: ReadLog) -> int:
        """Journal reads through ``log`` from now on; first fold what it holds (a crash's
        leftovers, minus what a fold committed before the crash). Returns how many reads
        were recovered."""
        mark = self.kv_get(READ_LOG_TABLE, log.id)
        log.skip_folded(int(mark["lsn"]) if mark else 0)
        recovered = log.pending
        self._reads = log
        self.fold_reads()
        return recovered

    def detach_reads(self) -> None:
        """Fold everything and journal reads directly again (the log stays open)."""
        self.fold_reads()
        self._reads = None

    def log_read(self, events: list[Event]) -> None:
        """Journal one read's events: in the read log when there is one (one write, no
        commit), else appended at once without waiting for the disk."""
        log = self._reads
        if log is None:
            self.append(events, durable=False)
        else:
            log.write(events)

    def log_read_rows(self, rows: list[Row]) -> None:
        """:meth:`log_read` of a read's events as ``_readlog.row`` gives them."""
        log = self._reads
        if log is None:
            self.append(events_of(rows), durable=False)
        else:
            log.write_rows(rows)

    def fold_reads(self) -> int:
        """Fold the read log's records into the journal, in their order, after everything
        journaled before; every append and every read of the journal calls it first, so
        nothing is ordered before a read answered earlier, and every reader sees it."""
        log = self._reads
        if log is None or not log.pending:
            return 0
        folded = 0
        with log.folding:
            while batch := log.take(FOLD_RECORDS):
                self.fold_rows([row for r in batch for row in r[1]], log.id, batch[-1][0])
                log.folded(batch[-1][0])
                folded += len(batch)
        return folded

    # -- runs
    def create_run(self, run: Run, events: list[Event]) -> None:
        self.fold_reads()
        with self._tx() as cx:
            cx.execute(q.RUN_INSERT, (run.id, self._time(run.created_at), run.principal,
                                      run.status.value, run.model_dump_json()))
            self._append(cx, events)

    def save_run(self, run: Run, events: list[Event]) -> None:
        self.fold_reads()
        with self._tx() as cx:
            cx.execute(q.RUN_SAVE, (run.model_dump_json(), run.status.value, run.id))
            self._append(cx, events)

    def get_run(self, run_id: str) -> Run | None:
        rows = self._read(q.RUN, (run_id,))
        return Run.model_validate_json(rows[0][0]) if rows else None

    def list_runs(self, limit: int = 100, offset: int = 0, principal: str | None = None
                  ) -> list[Run]:
        return [Run.model_validate_json(r[0])
                for r in self._read(*q.runs(principal, limit, offset))]

    # -- requests
    def create_request(self, req: TakeoverRequest, events: list[Event]) -> TakeoverRequest:
        _whole(req)
        key = (req.run_id, req.idempotency_key)
        self.fold_reads()
        with self._tx() as cx:
            if req.idempotency_key is not None:  # a retry gets its request, quota or not
                found = cx.execute(q.REQUEST_BY_KEY, key).fetchall()
                if found:
                    return _request(found[0])
            row = cx.execute(q.RUN_PRINCIPAL, (req.run_id,)).fetchone()
            requester = str(row[0]) if row and row[0] is not None else None
            self._admit(cx, req, requester)
            added = cx.execute(q.REQUEST_INSERT, (
                req.id, req.run_id, req.instrument, req.status.value,
                self._time(req.created_at), self._time(req.expires_at), req.idempotency_key,
                req.version, requester, req.model_dump_json(),
                listed_document(req))).fetchall()
            if not added:  # a concurrent insert of the same key won
                found = cx.execute(q.REQUEST_BY_KEY, key).fetchall()
                if not found:  # pragma: no cover - the conflicting row cannot vanish
                    raise StoreError(f"request {req.id}: idempotency conflict with no row")
                return _request(found[0])
            self._append(cx, events)
        return req

    def _admit(self, cx: Tx, req: TakeoverRequest, requester: str | None) -> None:
        """The pending-request quota, inside the inserting transaction, so two inserts never
        both take the last slot."""
        check = self.pending_check
        if check is None or requester is None or req.status is not Status.PENDING \
                or req.supersedes is not None:
            return  # a stale request's fresh replacement is no new filing

        def count() -> tuple[int, datetime | None]:
            self._lock_requester(cx, str(requester))
            found = cx.execute(q.PENDING_OF, (requester,)).fetchone()
            return (int(found[0]), _when(found[1])) if found else (0, None)
        check(requester, count)

    def save_request(self, req: TakeoverRequest, expected_version: int,
                     events: list[Event]) -> bool:
        _whole(req)
        if events:
            self.fold_reads()
        req.version = expected_version + 1
        try:
            with self._tx() as cx:
                cur = cx.execute(q.REQUEST_SAVE, (req.status.value, req.version,
                                                  req.model_dump_json(), listed_document(req),
                                                  req.id, expected_version))
                if cur.rowcount != 1:
                    req.version = expected_version
                    return False
                self._append(cx, with_meanings(req, events))
        except BaseException:
            req.version = expected_version
            raise
        return True

    def get_request(self, request_id: str) -> TakeoverRequest | None:
        rows = self._read(q.REQUEST, (request_id,))
        return _request(rows[0]) if rows else None

    def request_ids(self, prefix: str, limit: int = 10) -> list[str]:
        like = prefix.replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"
        return [str(row[0]) for row in self._read(q.REQUEST_IDS, (like, limit))]

    def find_request(self, run_id: str, idempotency_key: str) -> TakeoverRequest | None:
        rows = self._read(q.REQUEST_BY_KEY, (run_id, idempotency_key))
        return _request(rows[0]) if rows else None

    def list_requests(self, status: Status | None = None, run_id: str | None = None,
                      instrument: str | None = None, limit: int = 100,
                      offset: int = 0) -> list[TakeoverRequest]:
        sql, args, _, _ = q.page(status, run_id, instrument, None, RequestSort.NEWEST,
                                 limit, offset)
        return [_request(r) for r in self._read(sql, args)]

    def page_requests(self, status: Status | None = None, run_id: str | None = None,
                      instrument: str | None = None, limit: int = 100, offset: int = 0,
                      sort: RequestSort | str = RequestSort.NEWEST,
                      requester: str | None = None) -> RequestPage:
        sort = RequestSort(sort)
        limit, offset = q.rows(limit), q.rows(offset)  # the page says what it read
        sql, args, count_sql, count_args = q.page(status, run_id, instrument, requester,
                                                  sort, limit, offset, self._listed)
        rows, counted = self._read_together((sql, args), (count_sql, count_args))
        return RequestPage(summaries(r[0] for r in rows), int(counted[0][0]) if counted else 0,
                           limit=limit, offset=offset, order=sort)

    def pending_of(self, principal: str) -> tuple[int, datetime | None]:
        row = self._read(q.PENDING_OF, (principal,))[0]
        return int(row[0]), _when(row[1])

    def open_runs_of(self, principal: str) -> int:
        return int(self._read(q.OPEN_RUNS_OF, (principal,))[0][0])

    def due_for_expiry(self, at_iso: str) -> list[TakeoverRequest]:
        try:
            at = datetime.fromisoformat(at_iso)
        except ValueError as exc:
            raise StoreError(f"due_for_expiry expects an ISO 8601 time, got {at_iso!r}") \
                from exc
        if at.tzinfo is None:
            at = at.replace(tzinfo=UTC)
        return [_request(r) for r in self._read(q.DUE, (self._time(at),))]

    def unfinished(self) -> list[TakeoverRequest]:
        return [_request(r) for r in self._read(q.UNFINISHED)]

    # -- the journal's reads and archive (writing it is the dialect's)
    def journal(self, run_id: str, after: int = 0, limit: int = 100) -> list[Event]:
        self.fold_reads()
        return [row_event(r) for r in self._read(q.RUN_EVENTS, (run_id, after, limit))]

    def request_events(self, request_id: str, type_: str, limit: int = 100) -> list[Event]:
        """``request_id``'s events of type ``type_`` in the store, oldest first (reads are
        never a request's, so the read log is not folded first)."""
        return [row_event(r) for r in self._read(q.REQUEST_EVENTS, (request_id, type_, limit))]

    def recent(self, run_id: str, limit: int = 40) -> list[Event]:
        """The run's last ``limit`` events, oldest first."""
        self.fold_reads()
        return [row_event(r) for r in reversed(self._read(q.RUN_RECENT, (run_id, limit)))]

    def chain(self, after: int = 0, limit: int = 1000) -> list[tuple[Any, ...]]:
        self.fold_reads()
        return self._read(q.CHAIN_PAGE, (after, limit))

    def segments(self) -> list[Segment]:
        return [row_segment(r) for r in self._read(q.SEGMENTS)]

    def record_archive(self, segment: Segment) -> bool:
        with self._tx() as cx:
            self._lock_archive(cx)
            first = cx.execute(q.FIRST_LIVE).fetchone()
            if first is None or (int(first[0]), first[1]) != (segment.first_seq, segment.prev):
                return False  # archived by someone else meanwhile
            gone = cx.execute(q.DROP_ARCHIVED, (segment.first_seq, segment.last_seq)).rowcount
            if gone != segment.events:
                raise StoreError(f"archiving seqs {segment.first_seq} to {segment.last_seq}: "
                                 f"{gone} events in the store, {segment.events} in the "
                                 "segment; nothing was archived")
            cx.execute(q.SEGMENT_INSERT, (*segment.row()[:-1],
                                          self._time(segment.archived_at)))
        return True

    # -- approved setpoints, and small keyed tables (tokens, plans...): JSON documents
    def _document(self, sql: str, args: tuple[Any, ...]) -> dict[str, Any] | None:
        rows = self._read(sql, args)
        return dict(json.loads(rows[0][0])) if rows else None

    def _write(self, sql: str, args: tuple[Any, ...]) -> None:
        with self._tx() as cx:
            cx.execute(sql, args)

    def get_setpoint(self, instrument: str, channel: int) -> dict[str, Any] | None:
        return self._document(q.SETPOINT_GET, (instrument, channel))

    def put_setpoint(self, instrument: str, channel: int, data: dict[str, Any]) -> None:
        self._write(q.SETPOINT_PUT, (instrument, channel, json.dumps(data, default=str)))

    #: The database's clock, in seconds since the epoch (each dialect has its own).
    _clock_sql = ""

    def clock_seconds(self) -> float:
        """The database's clock: gateways on one store (several hosts on PostgreSQL) judge
        each other's heartbeats by it, never by their own clocks, which may disagree."""
        return float(self._read(self._clock_sql)[0][0])

    def kv_get(self, table: str, key: str) -> dict[str, Any] | None:
        return self._document(q.KV_GET, (table, key))

    def kv_put(self, table: str, key: str, data: dict[str, Any]) -> None:
        self._write(q.KV_PUT, (table, key, json.dumps(data, default=str)))

    def kv_list(self, table: str) -> list[dict[str, Any]]:
        return [dict(json.loads(r[0])) for r in self._read(q.KV_LIST, (table,))]

    def kv_items(self, table: str) -> list[tuple[str, dict[str, Any]]]:
        return [(str(r[0]), dict(json.loads(r[1]))) for r in self._read(q.KV_ITEMS, (table,))]

    def kv_delete(self, table: str, key: str) -> None:
        self._write(q.KV_DELETE, (table, key))

