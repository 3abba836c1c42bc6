"""A fenced gateway (another took its bench over) writes to no instrument again: not a
write that needs no approval either (a meter's settings, a status command, a selection)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from bench_gate.config import default_config
from bench_gate.federation import TABLE
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread
from tests.conftest import own_port


async def _fenced(gw: Gateway) -> None:
    gw.store.kv_put(TABLE, gw.config.bench, {
        "instance": "the-other-one", "host": "elsewhere", "pid": 1,
        "heartbeat": gw.store.clock_seconds(), "rules": {}})
    deadline = time.monotonic() + 10
    while gw.core.registry.lost is None and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert gw.core.registry.lost is not None, "the beat never saw the other claim"


async def test_a_fenced_gateway_sends_no_unapproved_write_either(
        sim: SimBenchThread, tmp_path: Path, script: Principal) -> None:
    """A meter's function (measure-config) passes unattended on a live gateway; on a fenced
    one it reached the meter the other gateway now serves."""
    gw = Gateway(default_config(sim.psu_port, sim.dmm_port),
                 SqliteStore(tmp_path / "bench.db"))
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        with own_port(sim.dmm_resource_name, panel=True) as dmm:
            before = dmm.query("FUNC?").strip()
        await _fenced(gw)
        for message in ("CONF:CURR:DC", "*CLS", "SYST:BEEP"):  # no approval needed
            result = await gw.submit(run.id, "dmm", message)
            assert result.code == -203 and "no longer serves bench" in result.reason, \
                (message, result)
        with own_port(sim.dmm_resource_name, panel=True) as dmm:
            assert dmm.query("FUNC?").strip() == before
    finally:
        await gw.close()
        gw.store.close()
