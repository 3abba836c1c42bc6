"""A raw-socket SCPI instrument (``TCPIP0::<host>::<port>::SOCKET``) on the event loop.

The link is an :class:`asyncio.Protocol` with one future per answer, not asyncio streams:
a read is on every request's path, and streams' reader, writer, drain and timeout context
cost about twice the loop's time for the same bytes. What streams gave is kept: a lazy
open within the timeout, a reconnect after an error, a drop on a timeout, a broken
answer or a cancelled caller (so a late answer is never read as the next query's), and a
bound on an answer's length.
"""

from __future__ import annotations

import asyncio
from typing import cast

import pyvisa.rname

from .config import InstrumentConfig
from .errors import InstrumentError, NotSent

__all__ = ["MAX_ANSWER", "SocketLink", "kept_to"]

#: The longest answer a socket link accepts (a screenshot or a trace stays well below).
MAX_ANSWER = 16 * 1024 * 1024


class _AnswerTooLong(Exception):
    pass


class _ClosedEarly(Exception):
    pass


class _Answers(asyncio.Protocol):
    """One connection: bytes in, one answer (up to the read terminator) per waiter."""

    def __init__(self, term: bytes) -> None:
        self.term = term
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        #: Where the terminator search resumes: the bytes before it were searched already.
        self.searched = 0
        self.waiter: asyncio.Future[bytes] | None = None
        self.lost = False
        self._writable: asyncio.Future[None] | None = None
        #: Its transport's loop. Kept: on Python 3.11 each asyncio.get_running_loop() is a
        #: getpid() system call, and a read asked for the loop four times.
        self.loop = asyncio.get_running_loop()
        self._closed: asyncio.Future[None] = self.loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have the Transport API without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.waiter is not None:
            self._answer()
        elif len(self.buffer) > MAX_ANSWER:
            self.abort()  # nobody asked for these: never keep more than one answer's worth

    def _answer(self) -> None:
        waiter = self.waiter
        assert waiter is not None
        end = self.buffer.find(self.term, self.searched)
        if end < 0:
            self.searched = max(0, len(self.buffer) - len(self.term) + 1)
            if len(self.buffer) > MAX_ANSWER:
                self._settle(_AnswerTooLong())
            return
        end += len(self.term)
        line = bytes(self.buffer[:end])
        del self.buffer[:end]
        self.searched = 0
        self.waiter = None
        if not waiter.done():
            waiter.set_result(line)

    def _settle(self, exc: BaseException) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._settle(_ClosedEarly())
        self.resume_writing()
        if not self._closed.done():
            self._closed.set_result(None)

    def send(self, data: bytes) -> None:
        if self.lost or self.transport is None:
            raise _ClosedEarly()
        self.transport.write(data)

    @property
    def paused(self) -> bool:
        return self._writable is not None or self.lost

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    async def drained(self) -> None:
        """Wait while the transport's buffer is above its high-water mark."""
        if self._writable is not None:
            await self._writable
        if self.lost:
            raise _ClosedEarly()

    def unasked(self) -> int:
        """How many bytes wait that nobody asked for; a stray terminator (an instrument
        that ends its answers CR LF where LF ends them) is dropped, no answer."""
        if self.buffer and not self.buffer.strip():
            self.buffer.clear()
            self.searched = 0
        return len(self.buffer)

    def expect(self) -> asyncio.Future[bytes]:
        """The future of the next answer (already settled if its bytes are here)."""
        waiter = self.loop.create_future()
        if self.lost:
            waiter.set_exception(_ClosedEarly())
            return waiter
        self.waiter = waiter
        if self.buffer:
            self._answer()
        return waiter

    def abort(self) -> None:
        self.waiter = None
        if self.transport is not None:
            self.transport.abort()

    async def close(self) -> None:
        """Close, and wait at most a second for the connection to end."""
        if self.transport is not None:
            self.transport.close()
        try:
            async with asyncio.timeout(1):
                await asyncio.shield(self._closed)
        except TimeoutError:
            self.abort()


def kept_to(name: str, pinned: int | None, opens: int, connected: bool, command: str
            ) -> None:
    """Refuse ``command`` unsent on any connection but number ``pinned`` while a turn keeps
    to it (``Lane.one_connection``): a write's live recheck, a meter's function asked before
    a reading, a state read field by field, each stands for the connection it was read on,
    and an instrument that restarted, or a LAN that dropped, may answer a new one in a state
    nobody read. ``*IDN?`` alone may still ask who answers there (it changes nothing, IEEE
    488.2 §10.14); nothing else goes to that connection on this turn."""
    if pinned is None or command == "*IDN?":
        return
    if opens == pinned if connected else opens + 1 == pinned:
        return
    raise NotSent(f"{name}: the connection was lost midway through a turn kept to one (after "
                  "the live recheck, or in one state read); nothing more is sent on a new one "
                  "on this turn (the instrument there may not be in the state that was read)")


class SocketLink:
    """A raw-socket SCPI instrument, opened lazily and reopened after an I/O error. A
    timeout or a broken answer drops the connection, so a late answer can never be read
    as the answer to the next query; a query that finds bytes nobody asked for fails."""

    def __init__(self, config: InstrumentConfig) -> None:
        parsed = pyvisa.rname.parse_resource_name(config.resource)
        if not isinstance(parsed, pyvisa.rname.TCPIPSocket):
            raise ValueError(f"{config.resource!r} is not a raw-socket resource")
        self.config = config
        self.host = str(parsed.host_address)
        self.port = int(parsed.port)
        self._timeout = config.timeout_ms / 1000
        self._term = config.read_termination.encode("ascii") or b"\n"
        self._wterm = config.write_termination
        self._conn: _Answers | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Connections opened so far: a new one needs the instrument lock again.
        self.opens = 0
        #: While set, the one connection a turn keeps to (:func:`kept_to`).
        self.pinned: int | None = None

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.lost

    async def _open(self, command: str) -> _Answers:
        loop = asyncio.get_running_loop()
        conn = self._conn
        if conn is not None and (self._loop is not loop or conn.lost):
            self._drop()  # a transport belongs to the loop that opened it
            conn = None
        if conn is None:
            kept_to(self.config.name, self.pinned, self.opens, False, command)
            try:
                async with asyncio.timeout(self._timeout):
                    _, conn = await loop.create_connection(
                        lambda: _Answers(self._term), self.host, self.port)
            except (OSError, TimeoutError) as exc:
                raise InstrumentError(
                    f"{self.config.name}: cannot open {self.config.resource}: "
                    f"{_describe(exc)}") from exc
            self._conn, self._loop = conn, loop
            self.opens += 1
        return conn

    def _fail(self, what: str, exc: BaseException) -> InstrumentError:
        self._drop()  # reconnect on the next call
        kind = "timed out" if isinstance(exc, TimeoutError) else "failed"
        return InstrumentError(f"{self.config.name}: {what} {kind}: {_describe(exc)}")

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and self._loop is asyncio.get_running_loop():
            conn.abort()

    async def write(self, command: str) -> None:
        """Send one command; wait only if a slow reader left the buffer above high water."""
        if self.pinned is not None:
            kept_to(self.config.name, self.pinned, self.opens, self.connected, command)
        conn = await self._ready(command)
        try:
            conn.send((command + self._wterm).encode("ascii"))
            if conn.paused:  # rare: a slow reader left the buffer above high water
                async with asyncio.timeout(self._timeout):
                    await conn.drained()
        except (OSError, TimeoutError, _ClosedEarly, UnicodeError) as exc:
            raise self._fail(f"write {command!r}", exc) from exc
        except asyncio.CancelledError:
            self._drop()
            raise

    async def query(self, command: str, extra_seconds: float = 0.0) -> str:
        """Send one command and read its answer within the timeout (plus ``extra_seconds``
        for a unit the instrument takes long over)."""
        if self.pinned is not None:
            kept_to(self.config.name, self.pinned, self.opens, self.connected, command)
        conn = self._conn
        loop = asyncio.get_running_loop()
        if conn is not None and conn.buffer and self._loop is loop and (
                extra := conn.unasked()):
            # Bytes nobody asked for (a second line, an answer ahead of its time): the
            # answers read before them may be misaligned, so this query says so rather than
            # start again silently on a new connection (lockstep.py); the next one does.
            self._drop()
            raise InstrumentError(
                f"{self.config.name}: query {command!r} not sent: the instrument had sent "
                f"{extra} bytes nobody asked for (answers out of step); the connection "
                "was dropped")
        if conn is None or conn.lost or self._loop is not loop:
            conn = await self._ready(command)
        try:
            data = (command + self._wterm).encode("ascii")
            # The answer's future and its timer exist before the command leaves: once it
            # has left, this task only has to suspend, so the loop goes idle at once and
            # the instrument (here, a simulator thread in the same process) gets the CPU.
            # call_later, not asyncio.timeout: no context manager and task bookkeeping.
            waiter = conn.expect()
            timer = loop.call_later(self._timeout + max(extra_seconds, 0.0), _expire, waiter)
            try:
                conn.send(data)
                line = await waiter
            finally:
                timer.cancel()
            return line.decode("ascii").strip()
        except (OSError, TimeoutError, _ClosedEarly, _AnswerTooLong, UnicodeError) as exc:
            raise self._fail(f"query {command!r}", exc) from exc
        except asyncio.CancelledError:
            self._drop()  # an answer may still come; never read it as the next one's
            raise

    async def _ready(self, command: str) -> _Answers:
        """The open connection, with no bytes nobody asked for waiting on it."""
        conn = await self._open(command)
        if conn.unasked():
            # Bytes nobody asked for (an instrument that answered twice): which answer is
            # whose is unknown, so start again on a new connection.
            self._drop()
            conn = await self._open(command)
        return conn

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and self._loop is asyncio.get_running_loop():
            await conn.close()


def _expire(waiter: asyncio.Future[bytes]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer within the timeout"
    if isinstance(exc, _ClosedEarly):
        return "the connection closed before the answer ended"
    if isinstance(exc, _AnswerTooLong):
        return f"the answer is longer than {MAX_ANSWER} bytes"
    return str(exc) or type(exc).__name__
