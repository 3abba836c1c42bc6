"""The reading side of a socket-door connection: the byte stream cut into messages, and the
few messages answered out of turn.

Messages end with LF (or CR LF), as on a LAN instrument's raw socket (IEEE 488.2, 7.5:
the program message terminator). :class:`Reader` is the connection's protocol on the
transport itself: bytes are cut into messages as they arrive and queued for the processor,
with no stream reader or reader task in between (one task wake-up a message fewer). It
keeps reading while a held write blocks the processor, which is how a disconnect is noticed
while a write is pending; when ``MAX_QUEUED`` messages wait it stops reading (TCP
back-pressure) and keeps the rest of what it got until the processor makes room. Out of
turn: ``GATE:STOP`` never waits; ``GATE:STAT?`` (or ``GATE:PLAN?``) jumps a stream held by
a write when no answer is owed before it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from ..scpi import MAX_MESSAGE_LENGTH, ScpiError
from . import _gate as gate
from ._gate import GateOp, is_gate_message, parse_gate

if TYPE_CHECKING:
    from ._door import Connection
    from ._listen import Door

__all__ = ["EOF", "HIGH_WATER", "MAX_QUEUED", "OVERSIZED", "Early", "Inbox", "Reader",
           "answer_early", "send_status", "status_op"]

logger = logging.getLogger("bench_gate.proxy._door")

#: Messages queued behind a held write before the reader stops reading (TCP back-pressure).
MAX_QUEUED = 1024
#: Written bytes buffered before the processor waits for the client to read them.
HIGH_WATER = 1 << 16
#: Queue markers: a message longer than the lexer takes (discarded, -223), the end.
OVERSIZED = object()
EOF = object()


class Inbox:
    """What the reader queued for the processor, in order, at most ``maxsize`` (then
    the end marker): the part of ``asyncio.Queue`` the door uses, for its one reader and
    one processor. A message costs an append and, when the processor waits, one future;
    a full inbox calls back its reader once the processor has taken a message."""

    __slots__ = ("_getter", "_items", "_loop", "_room", "maxsize")

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        # Made on its loop: asking for the loop at each get() is a getpid() on Python 3.11.
        self._loop = asyncio.get_running_loop()
        self._items: collections.deque[object] = collections.deque()
        self._getter: asyncio.Future[None] | None = None
        self._room: Callable[[], None] | None = None

    def qsize(self) -> int:
        return len(self._items)

    def full(self) -> bool:
        return len(self._items) >= self.maxsize

    def put_nowait(self, item: object) -> None:
        if self.full():
            raise asyncio.QueueFull
        self._add(item)

    def end(self) -> None:
        """Queue the end marker, full or not: nothing comes after it."""
        self._add(EOF)

    def _add(self, item: object) -> None:
        self._items.append(item)
        getter = self._getter
        if getter is not None:
            self._getter = None
            if not getter.done():
                getter.set_result(None)

    def when_room(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (once) when the processor has taken a message."""
        self._room = callback

    async def get(self) -> object:
        while not self._items:
            self._getter = self._loop.create_future()
            await self._getter
        item = self._items.popleft()
        room = self._room
        if room is not None:  # after this message's turn starts, as a reader task would
            self._room = None
            self._loop.call_soon(room)
        return item


class Reader(asyncio.Protocol):
    """A door connection's protocol: checks the peer, starts the :class:`Connection`, cuts
    what arrives into messages for its inbox, and tells the writer when to wait."""

    def __init__(self, door: Door) -> None:
        self.door = door
        self.conn: Connection | None = None
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        #: The rest of a message longer than the lexer takes is being dropped.
        self._discarding = False
        #: Bytes received while the inbox was full (reading paused), not cut yet.
        self._backlog = b""
        #: The client's end (EOF or the connection lost) was seen.
        self._ended = False
        self._writable: asyncio.Future[None] | None = None
        self._paused = False
        self.closed = asyncio.get_running_loop().create_future()

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = tr = cast(asyncio.Transport, transport)
        tr.set_write_buffer_limits(high=HIGH_WATER)
        self.conn = self.door.connected(self, tr)
        if self.conn is None:  # refused: nothing it sends is read
            self._ended = True

    def data_received(self, data: bytes) -> None:
        if self._ended:
            return
        if self._backlog:  # arrived as reading paused: kept in order behind the rest
            self._backlog += data
        else:
            self._cut(data)

    def eof_received(self) -> bool:
        self._end()
        return True  # the transport stays open: answers owed still go out (half-close)

    def connection_lost(self, exc: Exception | None) -> None:
        self._end()
        self._wake_writer()
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_writer()

    # -- the writer's side
    async def drained(self) -> None:
        """Wait while the client has not read what was written (``HIGH_WATER``)."""
        if self._paused and not self.closed.done():
            self._writable = asyncio.get_running_loop().create_future()
            await self._writable

    def _wake_writer(self) -> None:
        waiter, self._writable = self._writable, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- cutting messages
    def _cut(self, chunk: bytes) -> None:
        conn = self.conn
        assert conn is not None
        start = 0
        while True:
            if conn.queue.full():  # back-pressure: the rest waits for room
                self._backlog = chunk[start:]
                if self._backlog:
                    if not self._ended:
                        assert self.transport is not None
                        self.transport.pause_reading()
                    conn.queue.when_room(self._more)
                return
            end = chunk.find(b"\n", start)
            if end < 0:
                if not self._discarding:
                    self._buf += chunk[start:]
                    if len(self._buf) > MAX_MESSAGE_LENGTH + 1:
                        self._buf.clear()
                        self._discarding = True
                return
            piece = chunk[start:end]
            start = end + 1
            if self._discarding:
                self._discarding = False
                conn.queue.put_nowait(OVERSIZED)
                continue
            if self._buf:
                self._buf += piece
                piece = bytes(self._buf)
                self._buf.clear()
            _enqueue(conn, piece)

    def _more(self) -> None:
        """The processor took a message: cut what waited; read again once it is all in."""
        chunk, self._backlog = self._backlog, b""
        self._cut(chunk)
        if self._backlog:
            return
        if self._ended:
            self._finish()
        elif self.transport is not None:
            self.transport.resume_reading()

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        if not self._backlog:
            self._finish()

    def _finish(self) -> None:
        """Everything the client sent is cut: the last message (no terminator) goes in,
        then the end."""
        conn = self.conn
        if conn is None:
            return
        if self._buf and not self._discarding:
            self._buf += b"\n"
            chunk = bytes(self._buf)
            self._buf.clear()
            self._cut(chunk)
            if self._backlog:  # the inbox is full: _more() finishes
                return
        conn.gone.set()
        conn.queue.end()


class Early:
    """A ``GATE:STAT?`` (or ``GATE:PLAN?``) queued behind a write not classified yet: answered
    as soon as that write holds the stream, else in its turn."""

    __slots__ = ("answered", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.answered = False


def status_op(text: str) -> GateOp | None:
    """GATE:STAT? or GATE:PLAN? alone in a message, else None."""
    try:
        ops = [c.op for c in parse_gate(text)]
    except ScpiError:
        return None
    return ops[0] if ops in ([GateOp.STATUS_QUERY], [GateOp.PLAN_QUERY]) else None


def _enqueue(conn: Connection, line: bytes) -> None:
    if line.endswith(b"\r"):
        line = line[:-1]
    if not line.strip():
        return
    if len(line) > MAX_MESSAGE_LENGTH:
        conn.queue.put_nowait(OVERSIZED)
        return
    # latin-1 maps every byte to one character; the lexer refuses anything not ASCII.
    text = line.decode("latin-1")
    gate_message = is_gate_message(text)
    if gate_message and (_stop_now(conn, text) or _answer_now(conn, text)):
        return
    if gate_message and _answers_early(conn, text):
        # Behind a write the processor has not classified yet (it may be about to hold):
        # answered the moment it holds, without waiting for its decision.
        early = Early(text)
        conn.early.append(early)
        conn.queue.put_nowait(early)
        return
    if "?" in text:
        conn.queued_queries += 1
    conn.queue.put_nowait(text)


def _stop_now(conn: Connection, text: str) -> bool:
    """GATE:STOP never waits behind anything this connection sent before it: the emergency
    stop runs at once, and its errors (if any) join the error queue."""
    try:
        commands = parse_gate(text)
    except ScpiError:
        return False
    if [c.op for c in commands] != [GateOp.STOP]:
        return False
    conn.stopping = asyncio.ensure_future(conn.emergency_stop())
    return True


def _answer_now(conn: Connection, text: str) -> bool:
    """GATE:STAT? (or GATE:PLAN?) jumps the queue while a held write blocks the stream and
    no answer is owed before it, so a script can ask about what it is waiting behind."""
    if conn.queued_queries or conn.owing or not conn.holding:
        return False
    op = status_op(text)
    if op is None:
        return False
    send_status(conn, op)
    return True


def _answers_early(conn: Connection, text: str) -> bool:
    """The race of issue 18: a GATE:STAT? sent right after a write reaches the reader before
    the processor has classified that write, so nothing holds yet. With no answer owed
    before it and something ahead of it, it waits for that to hold."""
    if conn.queued_queries or conn.owing or conn.holding:
        return False
    if not (conn.busy or conn.queue.qsize()):
        return False
    return status_op(text) is not None


def send_status(conn: Connection, op: GateOp) -> None:
    if op is GateOp.STATUS_QUERY:
        conn.send(gate.request_status(conn.gateway, conn.last_request))
    else:
        conn.send(gate.plan_status(conn.gateway, conn.last_plan))


def answer_early(conn: Connection) -> None:
    """The stream now holds: answer the GATE:STAT? queued behind the held write."""
    for early in conn.early:
        op = status_op(early.text)
        if op is not None and not early.answered:
            send_status(conn, op)
            early.answered = True
    conn.early.clear()
