"""More simulated instruments, beyond the default bench's supply and meter: each has its own
pyvisa-sim definition and model, and is served on its own raw-socket port.

    SimServed        asyncio: one instrument, ``await start(host, port)`` / ``await stop()``
    SimServedThread  the same in a daemon thread, for synchronous callers and pytest fixtures

``python -m sim_instruments serve --extra smu=5557`` serves one beside the default bench; a
lab's bench.toml points an instrument at it (docs/simulated-bench.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import threading
from types import TracebackType

from ._dl3021 import SimDl3021
from ._dmm6500 import SimDmm6500
from ._dp832 import SimDp832
from ._e3631a import SimE3631a
from ._model import SimInstrument
from ._resources import cached_definition, open_fresh_resource_manager
from ._server import MAX_LINE, STOP_TIMEOUT, _converse, socket_resource_name
from ._smu import SimSmu
from ._spd3303x import SimSpd3303x

__all__ = ["EXTRA", "SimServed", "SimServedThread", "extra_for_profile", "extra_yaml_path"]

#: Name -> (model, its pyvisa-sim definition in this package).
EXTRA: dict[str, tuple[type[SimInstrument], str]] = {
    "smu": (SimSmu, "k2450.yaml"),
    "dmm6500": (SimDmm6500, "dmm6500.yaml"),
    "e3631a": (SimE3631a, "e3631a.yaml"),
    "dl3021": (SimDl3021, "dl3021.yaml"),
    "dp832": (SimDp832, "dp832.yaml"),
    "spd3303x": (SimSpd3303x, "spd3303x.yaml"),
}


def extra_yaml_path(name: str) -> pathlib.Path:
    """The pyvisa-sim definition of the extra instrument ``name`` (``smu``)."""
    if name not in EXTRA:
        raise KeyError(f"no simulated instrument {name!r}; there are {', '.join(EXTRA)}")
    return pathlib.Path(__file__).with_name(EXTRA[name][1])


def extra_for_profile(profile: str) -> str | None:
    """The extra simulated instrument that plays the shipped profile ``profile``, if any."""
    return next((name for name, (model, _) in EXTRA.items() if model.profile == profile), None)


class SimServed:
    """One fresh simulated instrument (``.instrument``), servable on a 127.0.0.1 port."""

    def __init__(self, name: str) -> None:
        path = extra_yaml_path(name)
        model = EXTRA[name][0]
        self._rm = open_fresh_resource_manager(path)
        self.instrument = model.open(self._rm, cached_definition(path))
        self.host = ""
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def resource_name(self) -> str:
        """``TCPIP0::<host>::<port>::SOCKET`` for pyvisa-py."""
        return socket_resource_name(self.host, self.port)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen (port 0: any free port); returns the port."""
        if self._server is not None:
            raise RuntimeError("this simulated instrument is already served")
        self._server = await asyncio.start_server(self._handle, host, port, limit=MAX_LINE)
        self.host, self.port = host, self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        """Close the port and every connection, then the instrument."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=STOP_TIMEOUT)
        if self._server is not None:
            await self._server.wait_closed()
        self.instrument.close()
        self._rm.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self._writers.add(writer)
        session = self.instrument.open_session()
        try:
            await _converse(self.instrument, reader, writer, session)
        except ConnectionError:
            pass  # the client went away mid-answer
        finally:
            self.instrument.close_session(session)  # its lock goes with it
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            if task is not None:
                self._tasks.discard(task)


class SimServedThread:
    """A served simulated instrument on its own event loop in a daemon thread."""

    def __init__(self, name: str, host: str = "127.0.0.1", port: int = 0,
                 start_timeout: float = 10.0) -> None:
        self.served = SimServed(name)
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(host, port),
                                        name=f"sim-{name}", daemon=True)
        self._thread.start()
        if not self._started.wait(start_timeout):
            raise TimeoutError(f"the simulated {name} did not start within {start_timeout} s")
        if self._failure is not None:
            self._thread.join()
            raise self._failure

    @property
    def instrument(self) -> SimInstrument:
        return self.served.instrument

    @property
    def port(self) -> int:
        return self.served.port

    @property
    def resource_name(self) -> str:
        return self.served.resource_name

    def close(self, timeout: float = 10.0) -> None:
        """Stop the instrument and its thread; calling it again does nothing."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)

    def __enter__(self) -> SimServedThread:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _run(self, host: str, port: int) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            try:
                loop.run_until_complete(self.served.start(host, port))
            except BaseException as exc:  # handed to the constructor's caller
                self._failure = exc
            finally:
                self._started.set()
            if self._failure is None:
                loop.run_forever()
            loop.run_until_complete(self.served.stop())
        finally:
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()
