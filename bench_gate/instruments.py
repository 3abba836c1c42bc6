"""Instruments: one serialized I/O lane per instrument.

A lane runs one job at a time, in order, so two commands never interleave on an instrument.
Jobs are coroutines over an :class:`AsyncLink`:

- a raw-socket LAN instrument (``TCPIP0::<host>::<port>::SOCKET``) is reached on the event
  loop itself (:class:`SocketLink`, ``socket_link.py``): no thread hop per command;
- every other resource (VXI-11, HiSLIP, USB, GPIB, serial, pyvisa-sim) goes through pyvisa
  (:class:`PyvisaLink`), whose blocking calls run on the lane's own thread.

Errors are translated to :class:`InstrumentError` here and nowhere else.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, cast

import pyvisa
import pyvisa.errors
import pyvisa.rname

from .config import InstrumentConfig
from .errors import InstrumentError
from .identity import Asked, Identity
from .locking import InstrumentLock
from .socket_link import SocketLink, kept_to

__all__ = ["AsyncLink", "Lane", "Link", "PyvisaLink", "SocketLink", "open_link"]

T = TypeVar("T")

class Link(Protocol):
    """A blocking link (pyvisa, or an in-memory simulator); a lane runs it on its thread."""

    def write(self, command: str) -> None: ...
    def query(self, command: str, extra_seconds: float = 0.0) -> str: ...
    def close(self) -> None: ...


class AsyncLink(Protocol):
    """The link a lane's jobs drive: one coroutine per direction. A query waits for its
    answer the link's own timeout plus ``extra_seconds``: what the instrument was told makes
    that one slow (a reading at NPLC 100, ``*TST?``; scpi._timing)."""

    async def write(self, command: str) -> None: ...
    async def query(self, command: str, extra_seconds: float = 0.0) -> str: ...
    async def close(self) -> None: ...


class PyvisaLink:
    """A pyvisa message-based resource, opened lazily and reopened after an I/O error."""

    def __init__(self, config: InstrumentConfig) -> None:
        self.config = config
        self._rm: pyvisa.ResourceManager | None = None
        self._res: Any = None
        #: Connections opened so far: a new one needs the instrument lock again.
        self.opens = 0
        #: While set, the one connection a turn keeps to (socket_link.kept_to).
        self.pinned: int | None = None

    @property
    def connected(self) -> bool:
        return self._res is not None

    def _open(self) -> Any:
        if self._res is None:
            try:
                if self._rm is None:
                    self._rm = pyvisa.ResourceManager(self.config.backend)
                res: Any = self._rm.open_resource(self.config.resource)
                res.timeout = self.config.timeout_ms
                res.read_termination = self.config.read_termination
                res.write_termination = self.config.write_termination
            except (pyvisa.errors.Error, OSError, ValueError) as exc:
                # pyvisa shares one manager per backend in a process; if someone closed it,
                # a fresh one is needed on the next attempt.
                self._rm = None
                raise InstrumentError(
                    f"{self.config.name}: cannot open {self.config.resource}: {exc}"
                ) from exc
            self._res = res
            self.opens += 1
        return self._res

    def _fail(self, what: str, exc: Exception) -> InstrumentError:
        self.close()  # reconnect on the next call
        kind = "timed out" if isinstance(exc, pyvisa.errors.VisaIOError) and \
            exc.error_code == pyvisa.constants.StatusCode.error_timeout else "failed"
        return InstrumentError(f"{self.config.name}: {what} {kind}: {exc}")

    def write(self, command: str) -> None:
        if self.pinned is not None:
            kept_to(self.config.name, self.pinned, self.opens, self.connected, command)
        res = self._open()
        try:
            res.write(command)
        except (pyvisa.errors.Error, OSError) as exc:
            raise self._fail(f"write {command!r}", exc) from exc

    def query(self, command: str, extra_seconds: float = 0.0) -> str:
        if self.pinned is not None:
            kept_to(self.config.name, self.pinned, self.opens, self.connected, command)
        res = self._open()
        try:
            if extra_seconds > 0:
                res.timeout = self.config.timeout_ms + int(extra_seconds * 1000)
            try:
                return str(res.query(command)).strip()
            finally:
                if extra_seconds > 0 and self._res is res:
                    res.timeout = self.config.timeout_ms
        except (pyvisa.errors.Error, OSError, UnicodeDecodeError) as exc:
            raise self._fail(f"query {command!r}", exc) from exc

    def close(self) -> None:
        res, self._res = self._res, None
        if res is not None:
            try:
                res.close()
            except Exception:
                pass


class _Threaded:
    """A blocking :class:`Link` run on one worker thread, seen as an :class:`AsyncLink`."""

    def __init__(self, name: str, link: Link) -> None:
        self.inner = link
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"lane-{name}")

    @property
    def opens(self) -> int | None:
        return getattr(self.inner, "opens", None)

    @property
    def connected(self) -> bool:
        return bool(getattr(self.inner, "connected", True))

    @property
    def pinned(self) -> int | None:
        return getattr(self.inner, "pinned", None)

    @pinned.setter
    def pinned(self, value: int | None) -> None:
        if hasattr(self.inner, "pinned"):
            self.inner.pinned = value

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def write(self, command: str) -> None:
        await self._call(self.inner.write, command)

    async def query(self, command: str, extra_seconds: float = 0.0) -> str:
        return await self._call(self.inner.query, command, extra_seconds)

    async def drop(self) -> None:
        """Close the connection, keep the thread: the next call opens a new one."""
        await self._call(self.inner.close)

    async def close(self) -> None:
        try:
            await self._call(self.inner.close)
        finally:
            self._pool.shutdown(wait=False)


def open_link(config: InstrumentConfig) -> Link | AsyncLink:
    """The link for an instrument: a socket on the event loop for a raw socket (unless the
    bench asks for pyvisa), pyvisa for every other resource."""
    if config.io != "pyvisa" and config.backend == "@py":
        try:
            return SocketLink(config)
        except ValueError:
            pass
    return PyvisaLink(config)


class Lane:
    """The single serialized I/O path to one instrument.

    Jobs wait in one queue, in order. The lane's driver task runs them back to back, so
    the instrument gets the next command as soon as it has answered the last one, however
    busy the loop is with other work. A read that finds the lane idle runs at once in its
    caller's task.
    """

    def __init__(self, name: str, link: Link | AsyncLink,
                 wire: Callable[[str], tuple[str, ...] | None] | None = None) -> None:
        self.name = name
        #: How a canonical text reaches the instrument (``Profile.wire``), for an instrument
        #: that addresses channels by selection; None: every text as it is.
        self._jobs_link: AsyncLink | None = _Addressed(self, wire) if wire is not None else None
        self.link: AsyncLink = (cast(AsyncLink, link)
                                if inspect.iscoroutinefunction(link.query)
                                else _Threaded(name, cast(Link, link)))
        self._queue: collections.deque[_Job[Any]] = collections.deque()
        self._busy = False
        self._driver: asyncio.Task[None] | None = None
        self.io_errors = 0
        #: Why its last job failed to reach it (shown by ``status``); None once one did.
        self.failing: str | None = None
        #: Set by an emergency stop: a running job stops sending further commands (it
        #: checks between units) and the stop's own job runs next.
        self.halted = False
        #: The instrument lock, taken on the lane's turn before a job on a new connection.
        self.lock: InstrumentLock | None = None
        #: Who answers ``*IDN?``, asked before the lock and the job (identity.py).
        self.identity: Identity | None = None

    @property
    def safe_waiting(self) -> bool:
        """A safe action waits for this lane (an emergency stop, a lost client's lease): a
        job that reads at length stops asking and lets it go next."""
        return self.halted or any(j.urgent for j in self._queue)

    async def run(self, job: Callable[[AsyncLink], Awaitable[T]], *, whole: bool = True,
                  urgent: bool = False) -> T:
        """Run ``job(link)``; jobs run one at a time, in order. A job that started runs to
        its end even if its caller is cancelled (it runs in the driver's task): half a job
        could leave a write without its read-back. A job that only reads may pass
        ``whole=False``: if the lane is idle it runs in its caller's task, and cancelled
        there it stops and the link drops the answer it was waiting for, so the next job
        never reads it."""
        if not whole and not urgent and not self._busy and not self._queue:
            self._busy = True
            try:  # _guarded's body, inline: one coroutine less on every read's path
                if self.identity is not None and self.identity.due(self.link):
                    await self.identity.check(self.link)  # another instrument: nothing else
                if self.lock is not None and self.lock.due(self.link):
                    await self.lock.take(self.link)  # never raises: shown, not fatal
                result = await job(self._job_link(False))
                self.failing = None
                return result
            except InstrumentError as exc:
                self.io_errors += 1
                self.failing = exc.message
                raise
            finally:
                self._busy = False
                self._kick()
        done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        if urgent:  # the safe action jumps the queue: it runs as soon as the lane is free
            self._queue.appendleft(_Job(job, done, urgent=True))
        else:
            self._queue.append(_Job(job, done))
        self._kick()
        return await done  # cancelled before it starts, the job is skipped

    def _kick(self) -> None:
        if self._queue and not self._busy and self._driver is None:
            self._driver = asyncio.get_running_loop().create_task(self._drive())

    async def _drive(self) -> None:
        while self._queue and not self._busy:
            item = self._queue.popleft()
            if item.done.done():
                continue  # its caller gave up before it started
            self._busy = True
            try:
                result = await self._guarded(item.job, item.urgent)
            except asyncio.CancelledError:  # the loop is shutting down
                item.done.cancel()
                self._driver = None
                raise
            except Exception as exc:
                if not item.done.done():
                    item.done.set_exception(exc)
            else:
                if not item.done.done():
                    item.done.set_result(result)
            finally:
                self._busy = False
        self._driver = None
        self._kick()

    async def _guarded(self, job: Callable[[AsyncLink], Awaitable[T]], urgent: bool = False
                       ) -> T:
        try:
            # Who answers, first: another instrument than the profile's gets nothing else.
            # The safe action never waits for it (an emergency stop still tries).
            if not urgent and self.identity is not None and self.identity.due(self.link):
                await self.identity.check(self.link)
            lock = self.lock if self.lock is not None and self.lock.due(self.link) else None
            if lock is not None and not urgent:
                await lock.take(self.link)  # never raises: shown, not fatal
            done = await job(self._job_link(urgent))
            if lock is not None and urgent:  # after a safe action: it waits for nothing
                await lock.take(self.link)
            self.failing = None
            return done
        except InstrumentError as exc:
            self.io_errors += 1
            self.failing = exc.message
            raise

    def _job_link(self, urgent: bool) -> AsyncLink:
        """The link a job drives. A job but a safe action (which never waits) asks
        ``*IDN?`` again on each connection it reaches: one its reads dropped is reopened by
        its next command, maybe on another instrument (identity.py)."""
        link = self._jobs_link or self.link
        if urgent or self.identity is None or not self.identity.expected:
            return link
        return Asked(self, link)

    @contextlib.contextmanager
    def one_connection(self) -> Iterator[None]:
        """Within, a job's commands go on one connection (the open one, or the first it
        opens): a write's recheck stands for the connection it was read on, and a state
        read is one state, so a lost one is not replaced until the block ends
        (socket_link.kept_to). Nested, the outermost block decides."""
        link: Any = self.link
        if not hasattr(link, "pinned") or link.pinned is not None:
            yield  # a link that cannot tell its connections apart, or kept to one already
            return
        opens = int(link.opens or 0)
        link.pinned = opens if link.connected else opens + 1
        try:
            yield
        finally:
            link.pinned = None

    def connection(self) -> int | None:
        """Which connection is open now (the link's count of them); None when none is, or
        the link cannot tell its connections apart."""
        link: Any = self.link
        opens = getattr(link, "opens", None)
        return int(opens) if opens is not None and link.connected else None

    async def drop(self) -> None:
        """Drop the connection, not the lane (answers out of step: lockstep.py): the next
        command opens a new one. Called from a job, on the lane's own turn."""
        link = self.link
        await (link.drop() if isinstance(link, _Threaded) else link.close())

    async def close(self) -> None:
        self.lock = None  # closing needs no lock (the instrument frees it with the connection)
        self.identity = None  # nor an *IDN?: closing sends nothing
        await self.run(lambda link: link.close())


class _Addressed:
    """The lane's link for an instrument that addresses channels by selection: each text is
    sent as ``Profile.wire`` renders it, the select command first, within the same call and
    so the same lane turn: no other job can move the selection in between; and on the same
    connection (a new one, after a restart, answers for the channel it selects at power-on)."""

    def __init__(self, lane: Lane, wire: Callable[[str], tuple[str, ...] | None]) -> None:
        self._lane = lane
        self._wire = wire

    def _texts(self, command: str) -> tuple[str, ...]:
        texts = self._wire(command)
        if not texts:
            raise InstrumentError(f"{self._lane.name}: {command.split(' ', 1)[0]} names "
                                  "channels this instrument cannot be sent by selection")
        return texts

    async def write(self, command: str) -> None:
        *selects, text = self._texts(command)
        with self._lane.one_connection():  # a new one has its own selection (power-on)
            for select in selects:
                await self._lane.link.write(select)
            await self._lane.link.write(text)

    async def query(self, command: str, extra_seconds: float = 0.0) -> str:
        *selects, text = self._texts(command)
        with self._lane.one_connection():  # a new one has its own selection (power-on)
            for select in selects:
                await self._lane.link.write(select)
            return await self._lane.link.query(text, extra_seconds)

    async def close(self) -> None:
        await self._lane.link.close()


@dataclass
class _Job(Generic[T]):
    job: Callable[[AsyncLink], Awaitable[T]]
    done: asyncio.Future[T]
    urgent: bool = False
