"""The simulated bench on raw sockets: one port per instrument, LF-terminated, like a LAN
instrument on port 5025.

    SimBench        asyncio: ``await start()`` / ``await stop()``
    SimBenchThread  the same in a daemon thread, for synchronous callers and pytest fixtures
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import pathlib
import random
import threading
from collections.abc import Awaitable, Callable
from types import TracebackType

from ._dmm import SimDmm
from ._model import PANEL, Session, SimInstrument
from ._psu import SimPsu
from ._resources import cached_definition, open_fresh_resource_manager

__all__ = ["BenchState", "BenchStateError", "SimBench", "SimBenchThread"]

logger = logging.getLogger(__name__)

#: Longest line a connection may send; longer ones get -223 and the connection is closed.
MAX_LINE = 1 << 20
#: A reading shorter than this answers at once: the simulated bench serves scripts and
#: tests that read the meter many times a second (the default NPLC 10 takes 0.4 s on the
#: real meter); what must take real time is a reading that outlasts a link's timeout.
SLOW_READING = 1.0
#: How long stop() waits for connection handlers to finish.
STOP_TIMEOUT = 5.0
#: A connection whose first line is this acts as the front panel: the remote lock
#: (SYSTem:LOCK) never covers it, as it does not cover the person at the bench.
PANEL_LINE = "SIM:PANEL"

_Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class BenchState(enum.Enum):
    CREATED = "created"
    RUNNING = "running"
    STOPPED = "stopped"


class BenchStateError(RuntimeError):
    """A SimBench was asked to do something its current state does not allow."""

    def __init__(self, state: BenchState, action: str) -> None:
        self.state = state
        self.action = action
        super().__init__(f"cannot {action} a SimBench that is {state.value}")


def socket_resource_name(host: str, port: int) -> str:
    return f"TCPIP0::{host}::{port}::SOCKET"


class SimBench:
    """Fresh simulated instruments (``.psu``, ``.dmm``), servable on 127.0.0.1 ports.

    Each SimBench opens its own pyvisa-sim library, so benches never share state. The DMM
    measures PSU channel 1 (its voltage and its current).
    """

    def __init__(self, definition: pathlib.Path | None = None) -> None:
        data = cached_definition(definition)
        self._rm = open_fresh_resource_manager(definition)
        self.psu = SimPsu.open(self._rm, data)
        self.dmm = SimDmm.open(self._rm, data)
        self.dmm.connect(lambda: self.psu.probe(1))
        self.state = BenchState.CREATED
        self.host = ""
        self._ports: tuple[int, int] | None = None
        self._servers: list[asyncio.Server] = []
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def psu_port(self) -> int:
        return self._bound()[0]

    @property
    def dmm_port(self) -> int:
        return self._bound()[1]

    @property
    def psu_resource_name(self) -> str:
        """``TCPIP0::<host>::<port>::SOCKET`` for pyvisa-py."""
        return socket_resource_name(self.host, self.psu_port)

    @property
    def dmm_resource_name(self) -> str:
        return socket_resource_name(self.host, self.dmm_port)

    async def start(
        self, host: str = "127.0.0.1", psu_port: int = 0, dmm_port: int = 0
    ) -> tuple[int, int]:
        """Listen for both instruments (port 0: any free port); returns (psu_port, dmm_port)."""
        if self.state is not BenchState.CREATED:
            raise BenchStateError(self.state, "start")
        try:
            for instrument, port in ((self.psu, psu_port), (self.dmm, dmm_port)):
                self._servers.append(await asyncio.start_server(
                    self._connection_handler(instrument), host, port, limit=MAX_LINE))
        except OSError:
            for server in self._servers:
                server.close()
            self._servers.clear()
            raise
        ports = tuple(s.sockets[0].getsockname()[1] for s in self._servers)
        self._ports = (ports[0], ports[1])
        self.host = host
        self.state = BenchState.RUNNING
        logger.info("simulated bench on %s: psu %d, dmm %d", host, *self._ports)
        return self._ports

    async def stop(self) -> None:
        """Close the ports and every connection, then the simulated instruments."""
        if self.state is BenchState.STOPPED:
            raise BenchStateError(self.state, "stop")
        self.state = BenchState.STOPPED
        for server in self._servers:
            server.close()
        for writer in list(self._writers):
            writer.close()
        if self._handlers:
            await asyncio.wait(list(self._handlers), timeout=STOP_TIMEOUT)
        for server in self._servers:
            await server.wait_closed()
        self.psu.close()
        self.dmm.close()
        self._rm.close()

    def _bound(self) -> tuple[int, int]:
        if self._ports is None:
            raise BenchStateError(self.state, "ask the ports of")
        return self._ports

    def _connection_handler(self, instrument: SimInstrument) -> _Handler:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            if task is not None:
                self._handlers.add(task)
            self._writers.add(writer)
            session = instrument.open_session()
            try:
                await _converse(instrument, reader, writer, session)
            except ConnectionError:
                pass  # the client went away mid-answer
            finally:
                instrument.close_session(session)  # its lock goes with it
                self._writers.discard(writer)
                writer.close()
                with contextlib.suppress(ConnectionError):
                    await writer.wait_closed()
                if task is not None:
                    self._handlers.discard(task)

        return handle


class _CrashHooks:
    """Test-only hooks for crash tests, read from the environment by the served bench only:

    SIM_WRITE_DELAY=S   hold each write S seconds before the instrument acts on it, so the
                        gateway is killed with a write in flight (the read-back waits behind)
    SIM_HANGUP_DROP=P   a held write whose client hung up meanwhile is dropped with
                        probability P (the bytes never made it), else applied late
    SIM_LOG=PATH        append every message the instrument acted on to PATH
    """

    def __init__(self) -> None:
        self.write_delay = float(os.environ.get("SIM_WRITE_DELAY", "0") or 0)
        self.hangup_drop = float(os.environ.get("SIM_HANGUP_DROP", "0") or 0)
        self.log = os.environ.get("SIM_LOG") or None
        #: Writes each instrument is still working on, whichever connection sent them.
        self._busy: dict[int, int] = {}

    async def deliver(self, instrument: SimInstrument, reader: asyncio.StreamReader,
                      message: str) -> bool:
        """Whether the instrument gets ``message`` at all (after any delay)."""
        key = id(instrument)
        if message.strip().upper() == "*OPC?":
            # IEEE 488.2 §12.5.3: *OPC? answers once every pending operation of the device
            # is complete, also one a client that hung up started (one parser per device).
            while self._busy.get(key):
                await asyncio.sleep(0.01)
        if self.write_delay and "?" not in message:
            self._busy[key] = self._busy.get(key, 0) + 1
            try:
                await asyncio.sleep(self.write_delay)
            finally:
                self._busy[key] -= 1
            if getattr(reader, "_eof", False) and random.random() < self.hangup_drop:
                logger.info("dropped %r: the client hung up while it was in flight", message)
                return False
        if self.log:
            with open(self.log, "a", encoding="ascii", errors="replace") as fp:
                fp.write(f"{instrument.profile}\t{message}\n")
        return True


_HOOKS: _CrashHooks | None = None


def install_crash_hooks() -> None:
    """Turn on the SIM_* hooks for this process (``python -m sim_instruments serve``)."""
    global _HOOKS
    hooks = _CrashHooks()
    _HOOKS = hooks if hooks.write_delay or hooks.log else None


async def _converse(
    instrument: SimInstrument, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
    session: Session,
) -> None:
    first = True
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError:
            return  # EOF; an unterminated last message is dropped, as on a real socket
        except asyncio.LimitOverrunError:
            instrument.push_error(-223, "Too much data")
            return
        message = line.decode("ascii", errors="replace").rstrip("\n").rstrip("\r")
        if not message.strip():
            continue
        if first and message.strip().upper() == PANEL_LINE:
            session = PANEL
            first = False
            continue
        first = False
        if _HOOKS is not None and not await _HOOKS.deliver(instrument, reader, message):
            continue
        try:
            # In memory and quick, so answered on the loop, as an instrument answers at once;
            # the instrument's lock serializes this with callers in other threads.
            answer = instrument.handle_message(message, session)
            busy = instrument.busy
        except Exception:
            logger.exception("simulator fault on %r", message)
            instrument.push_error(-200, "Execution error; simulator fault")
            continue
        if busy >= SLOW_READING:  # a slow reading takes as long as the real one would
            await asyncio.sleep(busy)
        if answer is not None:
            writer.write(answer.encode("ascii", errors="replace") + b"\n")
            await writer.drain()


class SimBenchThread:
    """A running SimBench on its own event loop in a daemon thread.

    >>> bench = SimBenchThread()          # ports chosen by the OS
    >>> bench.psu_resource_name           # doctest: +SKIP
    'TCPIP0::127.0.0.1::40123::SOCKET'
    >>> bench.close()
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        psu_port: int = 0,
        dmm_port: int = 0,
        definition: pathlib.Path | None = None,
        start_timeout: float = 10.0,
    ) -> None:
        self.bench = SimBench(definition)
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(
            target=self._run, args=(host, psu_port, dmm_port), name="sim-bench", daemon=True
        )
        self._thread.start()
        if not self._started.wait(start_timeout):
            raise TimeoutError(f"the simulated bench did not start within {start_timeout} s")
        if self._failure is not None:
            self._thread.join()
            raise self._failure

    @property
    def psu(self) -> SimPsu:
        return self.bench.psu

    @property
    def dmm(self) -> SimDmm:
        return self.bench.dmm

    @property
    def host(self) -> str:
        return self.bench.host

    @property
    def psu_port(self) -> int:
        return self.bench.psu_port

    @property
    def dmm_port(self) -> int:
        return self.bench.dmm_port

    @property
    def psu_resource_name(self) -> str:
        return self.bench.psu_resource_name

    @property
    def dmm_resource_name(self) -> str:
        return self.bench.dmm_resource_name

    def close(self, timeout: float = 10.0) -> None:
        """Stop the bench and its thread; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)

    def __enter__(self) -> SimBenchThread:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self, host: str, psu_port: int, dmm_port: int) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            try:
                loop.run_until_complete(self.bench.start(host, psu_port, dmm_port))
            except BaseException as exc:  # handed to the constructor's caller
                self._failure = exc
                return
            finally:
                self._started.set()
            loop.run_forever()
            loop.run_until_complete(self.bench.stop())
        finally:
            if self._failure is not None and self.bench.state is BenchState.CREATED:
                loop.run_until_complete(self.bench.stop())
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()
