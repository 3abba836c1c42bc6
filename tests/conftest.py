"""Shared fixtures: a fresh simulated bench served on 127.0.0.1, a gateway in front of it, and
its socket doors with the pyvisa clients a script would open on them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pyvisa

from bench_gate.auth import Tokens
from bench_gate.config import BenchConfig, InstrumentConfig, default_config
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Role, now
from bench_gate.proxy import Doors, start_doors
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item
                                  ) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """The loops a test marked ``asyncio(loop_factories=[...])`` may name; every other
    async test runs on asyncio's own loop only (pytest-asyncio runs an unmarked test on
    every factory this returns, and refuses an empty answer)."""
    factories: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
        "asyncio": asyncio.new_event_loop}
    marker = item.get_closest_marker("asyncio")
    if marker is None or "loop_factories" not in marker.kwargs:
        return factories
    with contextlib.suppress(ImportError):
        import uvloop
        factories["uvloop"] = uvloop.new_event_loop
    return factories

# A gateway that is given no paths keeps its files (a PostgreSQL gateway's read log, a
# default store) in the data directory: under test, a throwaway one per worker, never the
# user's own.
os.environ.setdefault("BENCH_GATE_HOME", tempfile.mkdtemp(prefix="bench-gate-test-"))


class Clock:
    """A clock tests can move forward, so expiry needs no sleeping."""

    def __init__(self) -> None:
        self.t = now()

    def __call__(self) -> datetime:
        return self.t

    def advance(self, **delta: float) -> None:
        self.t += timedelta(**delta)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium, once per test module (tests/_browser.py: skips without it)."""
    from ._browser import launch
    yield from launch()


@pytest.fixture
def sim() -> Iterator[SimBenchThread]:
    with SimBenchThread() as bench:
        yield bench


@pytest.fixture
def front_panel(sim: SimBenchThread) -> Iterator[Any]:
    """A direct connection to the simulated PSU: the person at the front panel (``SIM:PANEL``
    first, so the gateway's instrument lock does not cover it)."""
    rm = pyvisa.ResourceManager("@py")
    res = rm.open_resource(sim.psu_resource_name, read_termination="\n",
                           write_termination="\n", timeout=2000)
    res.write("SIM:PANEL")
    yield res
    res.close()
    rm.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def config(sim: SimBenchThread) -> BenchConfig:
    return default_config(sim.psu_port, sim.dmm_port)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "bench.db"


@pytest.fixture
async def gateway(config: BenchConfig, db_path: Path, clock: Clock) -> AsyncIterator[Gateway]:
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    yield gw
    await gw.close()
    gw.store.close()


@pytest.fixture
async def doors(gateway: Gateway, config: BenchConfig) -> AsyncIterator[Doors]:
    """The gateway's socket doors, each on an ephemeral port of 127.0.0.1."""
    for ic in config.instruments:
        ic.socket_port = 0
    d = await start_doors(gateway, Tokens(gateway.store), config)
    yield d
    await d.close()


@pytest.fixture
def open_client(doors: Doors) -> Iterator[Callable[..., Any]]:
    """``open_client(instrument="psu", timeout=15000)``: a script's pyvisa connection to a
    socket door, closed after the test (one the door has closed already is no error)."""
    rm = pyvisa.ResourceManager("@py")
    opened: list[Any] = []

    def open_(instrument: str = "psu", timeout: int = 15000) -> Any:
        host, port = doors.addresses[instrument]
        res = rm.open_resource(f"TCPIP0::{host}::{port}::SOCKET", read_termination="\n",
                               write_termination="\n", timeout=timeout)
        opened.append(res)
        return res

    yield open_
    for res in opened:
        with contextlib.suppress(Exception):
            res.close()
    rm.close()


@pytest.fixture
def script() -> Principal:
    return Principal(name="script-7", role=Role.REQUESTER)


@pytest.fixture
def olga() -> Principal:
    return Principal(name="olga", role=Role.OPERATOR)


@pytest.fixture
def pete() -> Principal:
    return Principal(name="pete", role=Role.OPERATOR)


def served_bench(sim: SimBenchThread, name: str, served: Any, profile: str,
                 limits: dict[int, Any] | None = None) -> BenchConfig:
    """The default simulated bench and one more simulated instrument served on its own port
    (sim_instruments.EXTRA), as ``name`` under ``profile``, with its envelope."""
    cfg = default_config(sim.psu_port, sim.dmm_port)
    cfg.instruments.append(InstrumentConfig(name=name, resource=served.resource_name,
                                            profile=profile, socket_port=0))
    if limits is not None:
        cfg.envelope[name] = limits
    return cfg


@contextlib.contextmanager
def own_port(resource_name: str, *, panel: bool = False) -> Iterator[Any]:
    """A simulator's own port: the instrument's real state, not what the gateway says
    (``panel``: as its front panel, which an interface lock never shuts out)."""
    rm = pyvisa.ResourceManager("@py")
    res: Any = rm.open_resource(resource_name, read_termination="\n",
                                write_termination="\n", timeout=2000)
    try:
        if panel:
            res.write("SIM:PANEL")
        yield res
    finally:
        res.close()
        rm.close()
