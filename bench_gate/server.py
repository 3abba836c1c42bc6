"""The composition root for ``bench-gate serve``: store, gateway, HTTP API, MCP (``/mcp``),
the console and the socket doors.

Only this module puts the doors together; no door imports another.
"""

from __future__ import annotations

import asyncio
import importlib
import socket
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import uvicorn
from fastapi import FastAPI
from starlette.routing import Route

from .api import create_app
from .auth import Tokens
from .config import BenchConfig, data_dir
from .errors import GatewayError
from .gateway import Gateway
from .identity import ask
from .mcp import McpDoor
from .models import now
from .store import Store
from .web import create_console

__all__ = ["Running", "ServerThread", "data_dir", "default_db", "run", "run_loop"]

T = TypeVar("T")


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to the end on a fresh event loop: uvloop where it is installed (its
    loop halves the cost of each socket round trip), else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def default_db() -> Path:
    return data_dir() / "bench-gate.db"


@dataclass
class Running:
    """A serving bench: what a caller (the CLI, a test) needs to reach and stop it."""

    url: str
    host: str
    port: int
    gateway: Gateway
    tokens: Tokens
    app: FastAPI
    server: uvicorn.Server
    loop: asyncio.AbstractEventLoop
    doors: dict[str, tuple[str, int]] = field(default_factory=dict)
    doors_note: str = ""

    def stop(self) -> None:
        """Ask the server to stop; safe from any thread."""
        def _stop() -> None:
            self.app.state.stopping.set()
            self.server.should_exit = True
        self.loop.call_soon_threadsafe(_stop)


async def _start_doors(gateway: Gateway, tokens: Tokens, config: BenchConfig
                       ) -> tuple[Any, str]:
    """The socket doors from ``bench_gate.proxy``, or why there are none."""
    if not any(i.socket_port is not None for i in config.instruments):
        return None, "no socket doors configured"
    try:
        proxy = importlib.import_module("bench_gate.proxy")
        start_doors = proxy.start_doors
    except (ImportError, AttributeError) as exc:
        return None, f"socket doors not available in this build ({exc})"
    return await start_doors(gateway, tokens, config), ""


#: How long the banner waits for each instrument's ``*IDN?`` (``run(probe=True)``).
PROBE_SECONDS = 5.0


async def _probe(gateway: Gateway) -> None:
    """Ask each instrument ``*IDN?`` once, on its lane, so the banner says which is
    unreachable or another model (the lane and its identity keep why)."""
    async def one(inst: Any) -> None:
        name = inst.config.name
        try:
            await asyncio.wait_for(inst.lane.run(lambda link: ask(link, name), whole=False),
                                   PROBE_SECONDS)
        except TimeoutError:
            inst.lane.failing = f"no answer to *IDN? within {PROBE_SECONDS:g} s"
        except GatewayError:  # kept by the lane (failing) or its identity: the banner says
            pass
    await asyncio.gather(*(one(i) for i in gateway.core.instruments.values()))


async def _announce(running: Running, on_ready: Callable[[Running], None] | None,
                    probe: bool = False) -> None:
    """Call ``on_ready`` once uvicorn is serving (after its startup), never for a start
    that failed: the CLI creates the first admin token there, so a failed start (a port in
    use) uses none up. ``probe``: each instrument is asked who it is first."""
    while not running.server.started:
        if running.server.should_exit:
            return
        await asyncio.sleep(0.01)
    if probe:
        await _probe(running.gateway)
    if on_ready is not None:
        on_ready(running)


async def run(config: BenchConfig, store: Store, *, host: str | None = None,
              port: int | None = None, clock: Callable[[], Any] = now,
              on_ready: Callable[[Running], None] | None = None,
              log_level: str = "warning", probe: bool = False) -> None:
    """Serve until stopped (Ctrl-C, SIGTERM or :meth:`Running.stop`), then shut down.
    ``on_ready`` is called once the HTTP server is serving (``probe``: and each
    instrument was asked ``*IDN?``, for the banner to say which does not answer)."""
    host = host if host is not None else config.server.host
    port = port if port is not None else config.server.port
    gateway = Gateway(config, store, clock=clock)
    tokens = Tokens(store)
    await gateway.start()
    doors: Any = None
    try:
        doors, note = await _start_doors(gateway, tokens, config)
        addresses: dict[str, tuple[str, int]] = dict(doors.addresses) if doors else {}
        app = create_app(gateway, tokens, doors_info=addresses)
        mcp_door = McpDoor(gateway, tokens, host=host)
        app.router.routes.append(Route("/mcp", endpoint=mcp_door))  # streamable HTTP MCP
        app.mount("/", create_console(gateway, tokens, app.state.stopping))
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited by accepted
        sock.bind((host, port))
        sock.listen(1024)
        bound = sock.getsockname()[1]
        # No X-Forwarded-* rewriting: nothing in front of the gateway is trusted to set them.
        server = uvicorn.Server(uvicorn.Config(
            app, log_level=log_level, timeout_graceful_shutdown=3, access_log=False,
            proxy_headers=False))
        shown = f"[{host}]" if ":" in host else host
        running = Running(url=f"http://{shown}:{bound}", host=host, port=bound,
                          gateway=gateway, tokens=tokens, app=app, server=server,
                          loop=asyncio.get_running_loop(), doors=addresses, doors_note=note)
        announced = asyncio.create_task(_announce(running, on_ready, probe))
        try:
            async with mcp_door.running():
                await server.serve(sockets=[sock])
        finally:
            announced.cancel()
            app.state.stopping.set()
            sock.close()
    finally:
        if doors is not None:
            await doors.close()
        await gateway.close()


class ServerThread:
    """A serving bench on its own event loop in a daemon thread (tests, benchmarks)."""

    def __init__(self, config: BenchConfig, store: Store, *, host: str = "127.0.0.1",
                 port: int = 0, clock: Callable[[], Any] = now,
                 start_timeout: float = 20.0) -> None:
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self.running: Running | None = None

        def ready(r: Running) -> None:
            self.running = r
            self._ready.set()

        def target() -> None:
            try:
                run_loop(run(config, store, host=host, port=port, clock=clock,
                             on_ready=ready))
            except BaseException as exc:  # reported to the starting thread
                self._failure = exc
                self._ready.set()

        self._thread = threading.Thread(target=target, name="bench-gate", daemon=True)
        self._thread.start()
        if not self._ready.wait(start_timeout):
            raise TimeoutError(f"bench-gate did not start within {start_timeout} s")
        if self._failure is not None:
            raise self._failure

    @property
    def url(self) -> str:
        assert self.running is not None
        return self.running.url

    def close(self, timeout: float = 15.0) -> None:
        if self.running is not None and self._thread.is_alive():
            self.running.stop()
        self._thread.join(timeout)

    def __enter__(self) -> ServerThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
