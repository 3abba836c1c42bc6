"""Two gateways on one PostgreSQL store whose clocks disagree: whose clock says a bench's
claim is stale? The store's, never the reader's own."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import bench_gate.federation
from bench_gate.config import default_config
from bench_gate.errors import BenchTaken
from bench_gate.gateway import Gateway
from bench_gate.store import open_store
from sim_instruments import SimBenchThread
from tests import pg
from tests.core.test_multibench import gateway, stop

pg_cluster = pg.pg_cluster

SKEW = 10.0  # seconds: more than a claim's LIVE_SECONDS


class _SkewedClock:
    """``time`` as the federation module sees it, with this thread's wall clock ``SKEW``
    seconds ahead (the second gateway's host); other threads (the first gateway's beats,
    run on worker threads) keep the real one."""

    def __init__(self, skewed: threading.Thread) -> None:
        self.skewed = skewed

    def time(self) -> float:
        ahead = SKEW if threading.current_thread() is self.skewed else 0.0
        return time.time() + ahead

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@pytest.fixture
def sims() -> Iterator[tuple[SimBenchThread, SimBenchThread]]:
    with SimBenchThread() as a, SimBenchThread() as b:
        yield a, b


async def elsewhere(url: str, bench: str, sim: SimBenchThread, home: Path) -> Gateway:
    """A gateway on another host: its own data directory (its read log)."""
    config = default_config(sim.psu_port, sim.dmm_port)
    config.bench = bench
    config.journal.read_log = str(home / "reads.log")
    gw = Gateway(config, open_store(url))
    await gw.start()
    return gw


async def test_a_clock_ahead_never_takes_over_a_live_gateways_bench(
        pg_cluster: pg.PgCluster, sims: tuple[SimBenchThread, SimBenchThread],
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The claim's heartbeat was the writer's wall clock and its age the reader's: a second
    gateway named bench-a on a host whose clock ran 10 s ahead found the first one's claim
    (renewed every second) 10 s old, took the bench over and served it beside it (both
    executing on one psu, each with its own per-instrument lock). Both now read the
    store's clock: the second refuses to start."""
    url = pg_cluster.new_database()
    first = await gateway(url, "bench-a", sims[0])
    try:
        monkeypatch.setattr(bench_gate.federation, "time",
                            _SkewedClock(threading.current_thread()))
        time.sleep(1.5)  # the first gateway beats meanwhile, on its own (real) clock
        with pytest.raises(BenchTaken, match="already served by a live gateway"):
            second = await elsewhere(url, "bench-a", sims[1], tmp_path)
            await stop(second)
    finally:
        monkeypatch.undo()
        await stop(first)
