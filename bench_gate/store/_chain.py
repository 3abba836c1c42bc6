"""The journal's hash chain: every event carries the hash of the event before it.

One chain per store. The store computes it where events are appended (both dialects call
:func:`link` through :class:`Chain`), so every path that journals anything, reads' group
commits included, extends the same chain.

The hash of an event (encoding version 1), exactly::

    hash = lowercase hex of sha256( C ), C the ASCII bytes of the JSON text
    {"at":AT,"data":DATA,"prev":PREV,"request":REQUEST,"run":RUN,"seq":SEQ,"type":TYPE}

- keys in that (sorted) order, no whitespace anywhere, every non-ASCII character written as
  a ``\\uXXXX`` escape: Python's ``json.dumps(obj, sort_keys=True, separators=(",", ":"))``;
- SEQ: the event's position in the chain (an integer); RUN: the run id; REQUEST: the
  request id or ``null``; TYPE: the event type, such as ``"read_executed"``;
- AT: the event's time in UTC, ``"YYYY-MM-DDTHH:MM:SS.ffffffZ"`` (always six digits);
- DATA: the event's data object, in the same canonical form, nested objects included
  (object keys are strings; numbers are written as Python's ``json`` writes them: integers
  as digits, floats by ``repr``, so ``5.0`` stays ``5.0``);
- PREV: the hash of the event before it, or 64 zeros (:data:`GENESIS`) before the first.

A deleted event breaks the next event's PREV; an edited one no longer matches its own hash.
Whoever can rewrite the whole store can also recompute the whole chain: the head hash that
``journal verify`` prints is what to keep elsewhere (a lab notebook, a ticket) to make that
visible too.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from json.encoder import encode_basestring_ascii as _quote
from typing import Any

from ..models import Event
from . import _queries as q

__all__ = [
    "ENCODING",
    "GENESIS",
    "LOST",
    "Chain",
    "Link",
    "Segment",
    "canonical_at",
    "canonical_data",
    "event_line",
    "link",
]

#: The prev-hash of the first event of a store.
GENESIS = "0" * 64
#: The prev-hash an event gets when the events before it were found deleted (SQLite): the
#: chain stays visibly broken there instead of passing over the gap.
LOST = "f" * 64
#: What export and segment files say about how their hashes are computed.
ENCODING = "bench-gate journal chain v1: sha256 over canonical JSON (docs/interlocks.md)"

_SEP = (",", ":")
_ZERO = timedelta(0)
#: The canonical encoder (built once: ``json.dumps`` with options builds one per call).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=_SEP, default=str)
_PLAIN = json.JSONEncoder(default=str)
_CHAIN_FIELDS = ("seq", "prev", "hash")


def canonical_at(at: datetime) -> str:
    """The time as the chain hashes it: UTC, microseconds, ``Z`` (a naive time is UTC)."""
    if at.tzinfo is UTC:  # every event the gateway makes (models.now)
        return at.isoformat("T", "microseconds")[:-6] + "Z"
    offset = at.utcoffset()
    if offset is not None and offset != _ZERO:
        at = at.astimezone(UTC)
    text = at.isoformat(timespec="microseconds")
    return (text[:-6] if offset is not None else text) + "Z"


_SCALARS = (str, int, float, bool, type(None))


def _string_keys(value: Any) -> bool:
    """Every object key in ``value`` is a string: its JSON text then sorts as it will once
    read back (an integer key would sort as a number now, as a string then)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or not (isinstance(item, _SCALARS)
                                                or _string_keys(item)):
                return False
        return True
    if isinstance(value, list | tuple):
        return all(isinstance(item, _SCALARS) or _string_keys(item) for item in value)
    return True


def canonical_data(data: Mapping[str, Any]) -> str:
    """The data as it is stored and hashed: JSON with sorted keys and no whitespace, every
    non-ASCII character escaped. Values JSON cannot hold are stored as their ``str`` (as the
    journal always did). Reading the text back and writing it again gives the same text."""
    if _string_keys(data):
        return _CANONICAL.encode(data)
    return _CANONICAL.encode(json.loads(_PLAIN.encode(data)))


def link(seq: int, run: str, request: str | None, type_: str, at: str, data: str,
         prev: str) -> str:
    """The hash of one event: ``at`` from :func:`canonical_at`, ``data`` from
    :func:`canonical_data` (the module docstring gives the encoding)."""
    text = (f'{{"at":{_quote(at)},"data":{data},"prev":{_quote(prev)},"request":'
            f'{"null" if request is None else _quote(request)},"run":{_quote(run)},'
            f'"seq":{int(seq)},"type":{_quote(type_)}}}')
    return hashlib.sha256(text.encode("ascii")).hexdigest()


@dataclass(frozen=True, slots=True)
class Link:
    """One event as the chain sees it: what is hashed, its prev-hash and its hash."""

    seq: int
    run: str
    request: str | None
    type: str
    at: str  # canonical_at
    data: str  # canonical_data
    prev: str
    hash: str

    def expected(self) -> str:
        return link(self.seq, self.run, self.request, self.type, self.at, self.data,
                    self.prev)

    @classmethod
    def of(cls, ev: Event) -> Link:
        return cls(ev.seq, ev.run_id, ev.request_id, str(ev.type.value), canonical_at(ev.at),
                   canonical_data(ev.data), ev.prev, ev.hash)

    @classmethod
    def from_line(cls, line: Mapping[str, Any]) -> Link:
        """A line of an export or segment file (see :func:`event_line`)."""
        try:
            at = str(line["at"])
            return cls(int(line["seq"]), str(line["run"]),
                       None if line["request"] is None else str(line["request"]),
                       str(line["type"]), at, canonical_data(line["data"]),
                       str(line["prev"]), str(line["hash"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a journal line: {exc!r} in {dict(line)!r:.200}") from exc


def intact(ev: Event) -> bool:
    """``ev``'s own hash is what its fields give: a row edited in place is not."""
    return bool(ev.hash) and Link.of(ev).expected() == ev.hash


def event_line(ev: Event) -> dict[str, Any]:
    """One event as a line of an export or a segment: every hashed field, and its hash."""
    return {"seq": ev.seq, "run": ev.run_id, "request": ev.request_id,
            "type": ev.type.value, "at": canonical_at(ev.at), "data": ev.data,
            "prev": ev.prev, "hash": ev.hash}


class Chain:
    """The head (last seq and hash) a store appends after, and the hashing of an append.

    The store can always read its head back; this is what it last saw, for appends that do
    not read it first (SQLite's one-statement path: if another connection moved the head,
    the seq it takes is taken already, and the store reads the head back and retries)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seq = 0
        self.hash = GENESIS

    def known(self) -> tuple[int, str]:
        with self._lock:
            return self.seq, self.hash

    def moved(self, seq: int, hash_: str) -> None:
        """The head is now at ``seq`` (kept only if it is newer than what is known)."""
        with self._lock:
            if seq >= self.seq:
                self.seq, self.hash = seq, hash_

    def reset(self, seq: int, hash_: str) -> None:
        with self._lock:
            self.seq, self.hash = seq, hash_

    @staticmethod
    def extend(events: list[Event], seq: int, prev: str) -> list[tuple[Any, ...]]:
        """Number and hash ``events`` after (``seq``, ``prev``); each event gets its seq,
        prev and hash. Returns the rows to insert: (seq, run, request, type, at, data, prev,
        hash), the time as :func:`canonical_at` text, the data as :func:`canonical_data`."""
        rows = []
        for ev in events:
            seq += 1
            data = canonical_data(ev.data)
            at = canonical_at(ev.at)
            type_ = ev.type.value
            hash_ = link(seq, ev.run_id, ev.request_id, type_, at, data, prev)
            # As pydantic's own assignment does, without its per-field dispatch (a read's
            # append is on every query's path).
            ev.__dict__.update(seq=seq, prev=prev, hash=hash_)
            ev.__pydantic_fields_set__.update(_CHAIN_FIELDS)
            rows.append((seq, ev.run_id, ev.request_id, type_, at, data, prev, hash_))
            prev = hash_
        return rows


# ----------------------------------------------------------------------- rows of a store
#: Runs one statement (``?`` placeholders) in the caller's transaction; the rows, if any.
Execute = Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]


def _when(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def row_event(row: tuple[Any, ...]) -> Event:
    """A row of ``q.CHAIN_PAGE``/``q.RUN_EVENTS`` as an Event."""
    return Event(seq=row[0], run_id=row[1], request_id=row[2], type=row[3], at=_when(row[4]),
                 data=json.loads(row[5]), prev=row[6] or "", hash=row[7] or "")


def row_link(row: tuple[Any, ...]) -> Link:
    """A row of ``q.CHAIN_PAGE`` as the chain sees it (without building an Event)."""
    return Link(int(row[0]), str(row[1]), None if row[2] is None else str(row[2]),
                str(row[3]), canonical_at(_when(row[4])), canonical_data(json.loads(row[5])),
                str(row[6] or ""), str(row[7] or ""))


def row_segment(row: tuple[Any, ...]) -> Segment:
    return Segment(int(row[0]), int(row[1]), int(row[2]), str(row[3]), str(row[4]),
                   str(row[5]), _when(row[6]))


def backfill(execute: Execute) -> tuple[int, str]:
    """Chain the events journaled before the store had a chain, in seq order, after the
    newest one that has its hash (from :data:`GENESIS` on a store that has none); the head
    it leaves. Runs inside the migrating transaction (``q.CHAIN_MIGRATION``)."""
    last = execute(q.LAST_CHAINED, ())
    seq, prev = (int(last[0][0]), str(last[0][1])) if last else (0, GENESIS)
    while rows := execute(q.UNCHAINED, (1000,)):
        for row in rows:
            hash_ = link(int(row[0]), str(row[1]), row[2], str(row[3]),
                         canonical_at(_when(row[4])), canonical_data(json.loads(row[5])), prev)
            execute(q.LINK_UNCHAINED, (prev, hash_, row[0]))
            seq, prev = int(row[0]), hash_
    return seq, prev


# ----------------------------------------------------------------------- archive segments
@dataclass(frozen=True, slots=True)
class Segment:
    """An archived range of the chain: events ``first_seq``..``last_seq`` in one file."""

    first_seq: int
    last_seq: int
    events: int
    prev: str  # the prev-hash of its first event
    last_hash: str  # the hash of its last event
    path: str
    archived_at: datetime

    def row(self) -> tuple[Any, ...]:
        return (self.first_seq, self.last_seq, self.events, self.prev, self.last_hash,
                self.path, self.archived_at)
