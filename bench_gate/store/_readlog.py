"""The read log: a read's journal events, written to a file with one ``os.write`` before
the read's answer leaves, then folded into the journal (its seq order, its hash chain) in
batches, off the read's path.

- A written record survives a crash of the gateway process (the kernel holds the page),
  not a power loss before the next fold's commit: as a read committed with
  ``synchronous=NORMAL`` did before (docs/reliability.md).
- A fold commits a batch of records and, in the same transaction, the last record folded
  (kv ``read_log``, keyed by the log's id). A crash between that commit and the file's
  truncation leaves records the store already holds: the mark skips them at the next start.
- Each record is one line, ``CRC32 JSON``: the JSON is ``[n, [[run, request, type, at,
  data], ...]]``, ``n`` counting up, each event in the form the chain hashes (so a fold
  only numbers, hashes and inserts). A record is complete and checks before its read's
  answer is sent, so a last line that is incomplete or does not check (a crash in the
  middle of writing it) belongs to a read whose answer never left: it is dropped, and said.
  A bad line with good ones after it is damage no crash makes: the log is refused.
- The file is locked (``flock``) while a gateway has it open: two gateways never share one.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import logging
import os
import threading
import uuid
import zlib
from collections import deque
from datetime import datetime
from json.encoder import encode_basestring_ascii as _quote
from pathlib import Path
from typing import Any

from ..errors import StoreError
from ..models import Event, EventType
from ._chain import _CANONICAL, canonical_at, canonical_data, link

__all__ = ["READ_LOG_TABLE", "ReadLog", "ReadTemplate", "Record", "Row", "chained", "events_of",
           "flat_data", "row", "rows_of"]

logger = logging.getLogger(__name__)

#: The kv table that keeps, per log id, the last record folded into the journal.
READ_LOG_TABLE = "read_log"
#: A log this much larger than its unfolded records is rewritten with only them.
COMPACT_BYTES = 1 << 22
_MAGIC = "bench_gate_read_log"

#: One event as the log keeps it, in the chain's own form: (run, request, type, at, data),
#: ``at`` from :func:`canonical_at` and ``data`` from :func:`canonical_data`. A fold then
#: only numbers and hashes it.
Row = tuple[str, str | None, str, str, str]
#: One record: its number, its events, its line in the file.
Record = tuple[int, list[Row], bytes]
_TYPES = frozenset(t.value for t in EventType)
_RECEIVED = EventType.COMMAND_RECEIVED.value
_EXECUTED = EventType.READ_EXECUTED.value


def rows_of(events: list[Event]) -> list[Row]:
    return [(e.run_id, e.request_id, e.type.value, canonical_at(e.at), canonical_data(e.data))
            for e in events]


def row(run: str, type_: EventType, at: datetime,
        data: dict[str, str | float | list[str] | None]) -> Row:
    """One event of a read, without making an :class:`Event` on the read's path."""
    return (run, None, type_.value, canonical_at(at), flat_data(data))


class Rendered(list[Row]):
    """A read's rows with the JSON of their record already made (what :func:`_line` makes
    of the rows themselves): a template renders it while it has the parts at hand."""

    __slots__ = ("body",)

    def __init__(self, rows: list[Row], body: str) -> None:
        super().__init__(rows)
        self.body = body


class ReadTemplate:
    """A repeated read's two events (``command_received``, ``read_executed``) in the chain's
    form, all but their times and the answer encoded once: :meth:`rows` gives what
    :func:`row` gives for the same events, with the record's JSON made in the same go."""

    __slots__ = ("_executed", "_received")

    def __init__(self, received: dict[str, str | float | list[str] | None], message: str,
                 canonical: list[str]) -> None:
        self._received = flat_data(received)
        # Sorted keys: canonical, message, response; the answer goes last, before the '}'.
        empty = flat_data({"canonical": canonical, "message": message, "response": ""})
        self._executed = empty[:-len('""}')]

    def rows(self, run: str, received_at: datetime, executed_at: datetime,
             response: str) -> list[Row]:
        received, executed = canonical_at(received_at), canonical_at(executed_at)
        data = f"{self._executed}{_quote(response)}}}"
        quoted = _quote(run)  # a canonical time is ASCII digits, '-', ':', '.', 'T', 'Z'
        return Rendered(
            [(run, None, _RECEIVED, received, self._received),
             (run, None, _EXECUTED, executed, data)],
            f'[{quoted},null,"{_RECEIVED}","{received}",{self._received}],'
            f'[{quoted},null,"{_EXECUTED}","{executed}",{data}]')


def events_of(rows: list[Row]) -> list[Event]:
    """The events ``rows`` hold (for a store without a read log)."""
    return [Event(run_id=run, request_id=request, type=EventType(type_),
                  at=datetime.fromisoformat(at), data=json.loads(data))
            for run, request, type_, at, data in rows]


def flat_data(data: dict[str, str | float | list[str] | None]) -> str:
    """:func:`canonical_data` of a read's data, without its walk for keys that are not
    strings: a read's data is an object of strings, numbers, nulls and lists of strings
    under the gateway's own string keys, so the encoder alone gives the same text."""
    return _CANONICAL.encode(data)


def _line(number: int, rows: list[Row]) -> bytes:
    if type(rows) is Rendered:  # made by its template: the same text
        body = rows.body
    else:
        body = ",".join(f'[{_quote(run)},{"null" if request is None else _quote(request)},'
                        f'{_quote(type_)},{_quote(at)},{data}]'
                        for run, request, type_, at, data in rows)
    text = f"[{number},[{body}]]".encode("ascii")  # canonical data is ASCII, one line
    return b"%08x %b\n" % (zlib.crc32(text), text)


def _record(line: bytes) -> tuple[int, list[Row]] | None:
    """The record a line holds, or None if it does not check."""
    crc, _, body = line.partition(b" ")
    try:
        if len(crc) != 8 or int(crc, 16) != zlib.crc32(body):
            return None
        number, items = json.loads(body)
        rows: list[Row] = []
        for run, request, type_, at, data in items:
            if not (isinstance(run, str) and isinstance(request, str | None)
                    and type_ in _TYPES and isinstance(data, dict)
                    and canonical_at(datetime.fromisoformat(at)) == at):
                return None
            rows.append((run, request, type_, at, canonical_data(data)))
        return int(number), rows
    except (ValueError, TypeError):
        return None


def chained(rows: list[Row], seq: int, prev: str) -> list[tuple[Any, ...]]:
    """Number and hash ``rows`` after (``seq``, ``prev``): the journal's rows (seq, run,
    request, type, at, data, prev, hash), as ``Chain.extend`` gives them for events."""
    out = []
    for run, request, type_, at, data in rows:
        seq += 1
        hash_ = link(seq, run, request, type_, at, data, prev)
        out.append((seq, run, request, type_, at, data, prev, hash_))
        prev = hash_
    return out


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class ReadLog:
    """One gateway's read log file. ``write`` is the read's path; the store folds
    (:meth:`take`, :meth:`folded`) under :attr:`folding`."""

    #: A log this much larger than its unfolded records is rewritten with only them.
    compact_bytes = COMPACT_BYTES

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = self._open(path)
        #: Serializes writes against truncation; and folds against each other.
        self._lock = threading.Lock()
        self.folding = threading.Lock()
        #: Bytes of a torn last record dropped at open (a read whose answer never left).
        self.torn = 0
        try:
            with open(self._fd, "rb", closefd=False) as f:
                data = f.read()
            self.id, self._header, records = self._parse(data)
        except BaseException:
            os.close(self._fd)
            raise
        self._pending: deque[Record] = deque(records)
        #: Bytes of the pending records' lines: the rest of the file past the header is
        #: records folded already (dead), and the file is rewritten once that is large.
        self._waiting = sum(len(r[2]) for r in records)
        self._number = records[-1][0] if records else 0
        self._size = self._header + self._waiting
        if not self._header:  # a new file (or one cut short in its header) gets its header
            os.ftruncate(self._fd, 0)
            self._new_header()
        elif self._size != len(data):  # drop a torn tail
            os.ftruncate(self._fd, self._size)

    @staticmethod
    def _open(path: Path) -> int:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise StoreError(f"the read log {path} is in use by another gateway; each "
                             "gateway keeps its own") from exc
        return fd

    def _new_header(self) -> None:
        self.id = str(uuid.uuid4())
        header = (json.dumps({_MAGIC: 1, "id": self.id}) + "\n").encode()
        _write_all(self._fd, header)
        self._header = self._size = len(header)

    def _parse(self, data: bytes) -> tuple[str, int, list[Record]]:
        """(the log's id, the header's length, the records) of a file's bytes."""
        end = data.find(b"\n")
        if end < 0:  # empty, or a crash while its header was written
            self.torn = len(data)
            return "", 0, []
        try:
            header = json.loads(data[:end])
            log_id = str(header["id"]) if header.get(_MAGIC) == 1 else ""
        except (ValueError, TypeError, KeyError, AttributeError):
            log_id = ""
        if not log_id:
            raise StoreError(f"{self.path} is not a bench-gate read log (its first line); "
                             "move it aside")
        records: list[Record] = []
        pos = header_length = end + 1
        while pos < len(data):
            end = data.find(b"\n", pos)
            found = _record(data[pos:end]) if end >= 0 else None
            if found is None or (records and found[0] <= records[-1][0]):
                if any(_record(line) for line in data[pos:].split(b"\n")[1:]):
                    raise StoreError(
                        f"the read log {self.path} is damaged at byte {pos}: a record that "
                        "does not check, with good ones after it (no crash leaves that). "
                        "Keep a copy, and move it aside to start without its reads")
                self.torn = len(data) - pos
                logger.warning("read log %s: dropped a torn last record (%d bytes): a "
                               "crash while it was written, so its answer never left",
                               self.path, self.torn)
                break
            records.append((found[0], found[1], data[pos:end + 1]))
            pos = end + 1
        return log_id, header_length, records

    # -- the read's path
    def write(self, events: list[Event]) -> None:
        """Append one read's events as one record; returns once the kernel has it all."""
        self.write_rows(rows_of(events))

    def write_rows(self, rows: list[Row]) -> None:
        """Append one read's events, as :func:`row` gives them, as one record."""
        with self._lock:
            number = self._number + 1
            line = _line(number, rows)
            try:
                _write_all(self._fd, line)
            except OSError as exc:  # a part written must not stay before later records
                try:
                    os.ftruncate(self._fd, self._size)
                except OSError:
                    pass
                raise StoreError(f"cannot write the read log {self.path}: "
                                 f"{exc.strerror or exc}; the read was not journaled") from exc
            self._number = number
            self._size += len(line)
            self._waiting += len(line)
            self._pending.append((number, rows, line))

    # -- folding (the store's)
    @property
    def pending(self) -> int:
        return len(self._pending)

    def skip_folded(self, mark: int) -> None:
        """Records up to ``mark`` are in the journal already (a crash after a fold's commit,
        before the file was cut); numbering goes on after it."""
        with self._lock:
            self._drop(mark)
            self._number = max(self._number, mark)

    def take(self, limit: int) -> list[Record]:
        with self._lock:
            return list(itertools.islice(self._pending, limit))

    def folded(self, upto: int) -> None:
        """Records up to ``upto`` are committed to the journal: drop them, and cut the file
        when nothing else waits (or rewrite it with what waits, once what was folded from
        it is large: not at every fold of a long backlog, which would copy it each time
        while reads wait for the lock)."""
        with self._lock:
            self._drop(upto)
            try:
                if not self._pending:
                    os.ftruncate(self._fd, self._header)
                    self._size = self._header
                elif self._size - self._header - self._waiting > self.compact_bytes:
                    self._compact()
            except OSError as exc:  # the records are committed: a longer file only waits
                logger.warning("read log %s: cannot cut it: %s", self.path, exc)

    def _drop(self, upto: int) -> None:
        """Forget the pending records numbered up to ``upto`` (they come in order)."""
        pending = self._pending
        while pending and pending[0][0] <= upto:
            self._waiting -= len(pending.popleft()[2])

    def _compact(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        body = os.pread(self._fd, self._header, 0) + b"".join(r[2] for r in self._pending)
        with open(tmp, "wb") as out:
            out.write(body)
        os.replace(tmp, self.path)
        fd = self._open(self.path)
        os.close(self._fd)
        self._fd = fd
        self._size = len(body)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __repr__(self) -> str:
        return f"ReadLog({str(self.path)!r}, pending={self.pending})"

