"""The storage interface: every backend (SQLite now, PostgreSQL later) implements it.

Each method is one transaction. A request is saved with compare-and-swap on its version, so
a change that lost a race is reported, never silently applied over the winner's.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from ..listing import LISTED_HANDOFF, RequestSummary
from ..models import Event, Run, Status, TakeoverRequest

if TYPE_CHECKING:
    from ._chain import Segment
    from ._readlog import ReadLog
    from ._readlog import Row as ReadRow

__all__ = ["LISTED_HANDOFF", "PendingCheck", "RequestPage", "RequestSort", "Store"]


class RequestSort(enum.StrEnum):
    """The orders a list of requests comes in."""

    NEWEST = "newest"  # created last, first
    EXPIRY = "expiry"  # expiring soonest, first (what a reviewer must decide before it is lost)


class RequestPage(list[RequestSummary]):
    """One page of requests as a list shows them (``RequestSummary``), with ``total``: how
    many match in all."""

    def __init__(self, items: Iterable[RequestSummary], total: int, *, limit: int,
                 offset: int, order: RequestSort) -> None:
        super().__init__(items)
        self.total = total
        self.limit = limit
        self.offset = offset
        self.order = order


#: Called inside the transaction that files a pending request: (requester, a function that
#: counts the requester's pending requests and gives the soonest expiry). Raises to refuse.
PendingCheck = Callable[[str, Callable[[], tuple[int, datetime | None]]], None]


class Store(Protocol):
    #: The per-requester quota on pending requests, checked atomically with each insert of
    #: one (``bench_gate.quotas`` installs it); None checks nothing.
    pending_check: PendingCheck | None

    def create_run(self, run: Run, events: list[Event]) -> None: ...
    def save_run(self, run: Run, events: list[Event]) -> None: ...
    def get_run(self, run_id: str) -> Run | None: ...
    def list_runs(self, limit: int = 100, offset: int = 0, principal: str | None = None
                  ) -> list[Run]:
        """Newest first; ``principal`` keeps only that requester's runs, filtered before
        the page is cut (a requester's page is full of its own runs)."""
        ...

    def create_request(self, req: TakeoverRequest, events: list[Event]) -> TakeoverRequest:
        """Insert; if (run, idempotency key) exists already, return the existing request.
        A pending request passes ``pending_check`` first, in the same transaction."""
        ...

    def save_request(self, req: TakeoverRequest, expected_version: int,
                     events: list[Event]) -> bool:
        """Write ``req`` (version bumped) only if the stored version is ``expected_version``."""
        ...

    def get_request(self, request_id: str) -> TakeoverRequest | None: ...
    def request_ids(self, prefix: str, limit: int = 10) -> list[str]:
        """The ids that start with ``prefix``, in order, at most ``limit``."""
        ...

    def find_request(self, run_id: str, idempotency_key: str) -> TakeoverRequest | None: ...
    def list_requests(self, status: Status | None = None, run_id: str | None = None,
                      instrument: str | None = None, limit: int = 100,
                      offset: int = 0) -> list[TakeoverRequest]: ...
    def page_requests(self, status: Status | None = None, run_id: str | None = None,
                      instrument: str | None = None, limit: int = 100, offset: int = 0,
                      sort: RequestSort | str = RequestSort.NEWEST,
                      requester: str | None = None) -> RequestPage:
        """One page, sorted in SQL, with the total that match (counted in the same read).
        ``requester`` keeps the requests of that principal's runs. The items are
        :class:`~bench_gate.listing.RequestSummary`: never a request, never saved back."""
        ...

    def pending_of(self, principal: str) -> tuple[int, datetime | None]:
        """How many requests of ``principal``'s runs wait for a decision, and the soonest
        of their expiries."""
        ...

    def open_runs_of(self, principal: str) -> int:
        """How many of ``principal``'s runs are not closed."""
        ...

    def due_for_expiry(self, at_iso: str) -> list[TakeoverRequest]: ...

    def append(self, events: list[Event], durable: bool = True) -> list[Event]:
        """Journal ``events`` atomically at the end of the store's one hash chain: each gets
        its seq, its prev-hash and its hash (``bench_gate.store._chain``)."""
        ...

    def log_read(self, events: list[Event]) -> None:
        """Journal one read's events: in the read log if one is attached (one write,
        folded later), else appended at once without waiting for the disk."""
        ...

    def log_read_rows(self, rows: list[ReadRow]) -> None:
        """:meth:`log_read` of a read's events as ``store.read_row`` gives them (no models made)."""
        ...

    def attach_reads(self, log: ReadLog) -> int:
        """Journal reads through ``log``; first fold what it holds (how many reads)."""
        ...

    def detach_reads(self) -> None: ...

    def fold_reads(self) -> int:
        """Fold the read log into the journal now (every append and journal read does
        first); how many reads."""
        ...

    def journal(self, run_id: str, after: int = 0, limit: int = 100) -> list[Event]: ...
    def recent(self, run_id: str, limit: int = 40) -> list[Event]: ...

    def request_events(self, request_id: str, type_: str, limit: int = 100) -> list[Event]:
        """One request's events of one type in the store, oldest first."""
        ...

    def journal_head(self) -> tuple[int, str]:
        """The chain's head: the seq and hash the next append continues (0 and 64 zeros
        before the first event)."""
        ...

    def chain(self, after: int = 0, limit: int = 1000) -> list[tuple[Any, ...]]:
        """Events after seq ``after``, in seq order, as rows (seq, run_id, request_id, type,
        at, data as stored, prev, hash): what ``journal verify`` walks, unparsed."""
        ...

    def segments(self) -> list[Segment]:
        """The archived segments, oldest first."""
        ...

    def record_archive(self, segment: Segment) -> bool:
        """Delete the segment's events from the store and record the segment, in one
        transaction; False (nothing done) if the store's oldest event is no longer the
        segment's first (another archiver was quicker)."""
        ...

    def get_setpoint(self, instrument: str, channel: int) -> dict[str, Any] | None: ...
    def put_setpoint(self, instrument: str, channel: int, data: dict[str, Any]) -> None: ...

    def clock_seconds(self) -> float:
        """The store's own clock (seconds since the epoch): one clock for every gateway on
        it, whatever each host's clock says (a bench claim's heartbeat and its age)."""
        ...

    def kv_get(self, table: str, key: str) -> dict[str, Any] | None: ...
    def kv_put(self, table: str, key: str, data: dict[str, Any]) -> None: ...
    def kv_list(self, table: str) -> list[dict[str, Any]]: ...
    def kv_items(self, table: str) -> list[tuple[str, dict[str, Any]]]: ...
    def kv_delete(self, table: str, key: str) -> None: ...
    def unfinished(self) -> list[TakeoverRequest]: ...

    def notify(self, message: dict[str, Any]) -> None:
        """Tell other gateways sharing this store of a change (no-op where none can)."""
        ...

    def listen(self, callback: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """Call ``callback`` (from another thread) with other gateways' notifications;
        returns a function that stops listening."""
        ...

    def close(self) -> None: ...
