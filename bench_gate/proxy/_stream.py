"""The reading side of a socket-door connection: the byte stream cut into messages, and the
few messages answered out of turn.

Messages end with LF (or CR LF), as on a LAN instrument's raw socket (IEEE 488.2, 7.5:
the program message terminator). The reader queues them for the processor and keeps
reading while a held write blocks the processor, which is how a disconnect is noticed while
a write is pending. Out of turn: ``GATE:STOP`` never waits; ``GATE:STAT?`` (or
``GATE:PLAN?``) jumps a stream held by a write when no answer is owed before it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import TYPE_CHECKING

from ..scpi import MAX_MESSAGE_LENGTH, ScpiError
from . import _gate as gate
from ._gate import GateOp, is_gate_message, parse_gate

if TYPE_CHECKING:
    from ._door import Connection

__all__ = ["EOF", "MAX_QUEUED", "OVERSIZED", "READ_CHUNK", "Early", "Inbox", "answer_early",
           "read_loop", "send_status", "status_op"]

#: Messages queued behind a held write before the reader stops reading (TCP back-pressure).
MAX_QUEUED = 1024
READ_CHUNK = 65536
#: Queue markers: a message longer than the lexer takes (discarded, -223), the end.
OVERSIZED = object()
EOF = object()


class Inbox:
    """What the reader queued for the processor, in order, at most ``maxsize``: the part of
    ``asyncio.Queue`` the door uses, for its one reader and one processor. A message costs
    an append and, when the processor waits, one future; a queue also keeps waiter lists
    and its count of unfinished tasks on every message."""

    __slots__ = ("_getter", "_items", "_putter", "maxsize")

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._items: collections.deque[object] = collections.deque()
        self._getter: asyncio.Future[None] | None = None
        self._putter: asyncio.Future[None] | None = None

    def qsize(self) -> int:
        return len(self._items)

    def full(self) -> bool:
        return len(self._items) >= self.maxsize

    def put_nowait(self, item: object) -> None:
        if self.full():
            raise asyncio.QueueFull
        self._items.append(item)
        _wake(self._getter)
        self._getter = None

    async def put(self, item: object) -> None:
        """Wait while full (the reader stops reading: TCP back-pressure), then queue."""
        while self.full():
            self._putter = asyncio.get_running_loop().create_future()
            await self._putter
        self.put_nowait(item)

    async def get(self) -> object:
        while not self._items:
            self._getter = asyncio.get_running_loop().create_future()
            await self._getter
        item = self._items.popleft()
        _wake(self._putter)
        self._putter = None
        return item


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


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


async def read_loop(conn: Connection) -> None:
    buf = bytearray()
    discarding = False
    try:
        while True:
            chunk = await conn.reader.read(READ_CHUNK)
            if not chunk:
                break
            start = 0
            while True:
                end = chunk.find(b"\n", start)
                if end < 0:
                    if not discarding:
                        buf += chunk[start:]
                        if len(buf) > MAX_MESSAGE_LENGTH + 1:
                            buf.clear()
                            discarding = True
                    break
                piece = chunk[start:end]
                start = end + 1
                if discarding:
                    discarding = False
                    await conn.queue.put(OVERSIZED)
                    continue
                buf += piece
                line = bytes(buf)
                buf.clear()
                await _enqueue(conn, line)
        if buf and not discarding:
            await _enqueue(conn, bytes(buf))
    except (ConnectionError, OSError):
        pass
    finally:
        conn.gone.set()
        with contextlib.suppress(asyncio.QueueFull):
            conn.queue.put_nowait(EOF)
        if conn.queue.full():  # make room for the end marker: the client is gone anyway
            await conn.queue.put(EOF)


async def _enqueue(conn: Connection, line: bytes) -> None:
    if line.endswith(b"\r"):
        line = line[:-1]
    if not line.strip():
        return
    if len(line) > MAX_MESSAGE_LENGTH:
        await conn.queue.put(OVERSIZED)
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
        await conn.queue.put(early)
        return
    if "?" in text:
        conn.queued_queries += 1
    await conn.queue.put(text)


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
