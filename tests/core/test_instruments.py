"""Lanes: a lost instrument gives a clear, journaled error, and the lane reconnects."""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path

import pytest

from bench_gate.config import default_config
from bench_gate.errors import InstrumentError
from bench_gate.gateway import Gateway
from bench_gate.instruments import AsyncLink, Lane
from bench_gate.models import Principal
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_lost_instrument_then_reconnect(tmp_path: Path, script: Principal) -> None:
    psu_port, dmm_port = free_port(), free_port()
    config = default_config(psu_port, dmm_port)
    config.instruments[0].timeout_ms = 500
    gw = Gateway(config, SqliteStore(tmp_path / "s.db"))
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        with pytest.raises(InstrumentError, match="psu"):
            await gw.submit(run.id, "psu", "*IDN?")
        journal = gw.store.journal(run.id, limit=100)
        assert journal[-1].type.value == "step_failed"
        assert "psu" in journal[-1].data["reason"]
        with pytest.raises(InstrumentError):
            await gw.submit(run.id, "psu", "VOLT 1,(@1)")  # no snapshot, nothing held
        assert gw.list_requests(run_id=run.id) == []
        with SimBenchThread(psu_port=psu_port, dmm_port=dmm_port):
            result = await gw.submit(run.id, "psu", "*IDN?")
            assert result.status == "executed"
            assert (result.response or "").startswith("Keysight")
    finally:
        await gw.close()
        gw.store.close()


class SlowLink:
    """Records the order in which jobs touch the instrument."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.inside = 0
        self.overlap = False
        self.lock = threading.Lock()

    def write(self, command: str) -> None:
        self.query(command)

    def query(self, command: str, extra_seconds: float = 0.0) -> str:
        with self.lock:
            self.inside += 1
            self.overlap |= self.inside > 1
        self.log.append(command)
        threading.Event().wait(0.001)
        with self.lock:
            self.inside -= 1
        return "0"

    def close(self) -> None:
        pass


async def test_lane_never_interleaves_jobs() -> None:
    link = SlowLink()
    lane = Lane("psu", link)

    def job(n: int):  # type: ignore[no-untyped-def]
        async def run(l: AsyncLink) -> None:  # noqa: E741
            await l.write(f"A{n}")
            await l.query(f"B{n}")
        return run

    await asyncio.gather(*(lane.run(job(n)) for n in range(40)))
    await lane.close()
    assert not link.overlap
    for i in range(0, len(link.log), 2):
        assert link.log[i][1:] == link.log[i + 1][1:], "a job's commands stay together"
