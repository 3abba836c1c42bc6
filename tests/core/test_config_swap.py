"""bench.toml edited between a person's approval and the write it covers: the instrument
name ``psu`` pointed at ANOTHER instrument (here a DP832 where the E36312A was), the gateway
restarted on the same store. An approval that outlives its own request (a standing plan, a
setpoint in force) was given on the instrument that answered ``*IDN?`` then: it never
covers another instrument that now answers under the same name. The effects are proven
on the simulators' own ports."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from bench_gate.config import BenchConfig, ChannelLimits, InstrumentConfig, default_config
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import Clock, own_port

SCOPE = {"instrument": "psu", "channels": [1], "voltage": [0, 5], "current_max": 0.5,
         "output_enable": False, "max_writes": 10, "timeout_minutes": 60}
LIMITS = {1: ChannelLimits(voltage=Decimal(6), current=Decimal(1))}


@pytest.fixture
def other() -> Iterator[SimServedThread]:
    """Another supply, a DP832, on a port of its own."""
    with SimServedThread("dp832") as served:
        yield served


def swapped(sim: SimBenchThread, other: SimServedThread) -> BenchConfig:
    """The same bench, with ``psu`` pointed at the DP832 (its resource and profile)."""
    cfg = default_config(sim.psu_port, sim.dmm_port)
    cfg.instruments[0] = InstrumentConfig(name="psu", resource=other.resource_name,
                                          profile="dp832", socket_port=0)
    cfg.envelope["psu"] = dict(LIMITS)
    return cfg


async def restarted(config: BenchConfig, db_path: Path, clock: Clock) -> Gateway:
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    return gw


def dp832_volts(other: SimServedThread) -> Decimal:
    with own_port(other.resource_name) as res:
        return Decimal(res.query("SOUR1:VOLT?"))


async def test_a_plan_approved_on_one_instrument_never_runs_on_another_under_its_name(
        config: BenchConfig, db_path: Path, clock: Clock, sim: SimBenchThread,
        other: SimServedThread, script: Principal, olga: Principal) -> None:
    gw = await restarted(config, db_path, clock)
    try:
        run = gw.create_run(script, "script", goal="sweep CH1")
        asked = await gw.request_plan(run.id, SCOPE)
        done = await gw.grant(asked.id, olga, ["setpoint"], proposal_hash=asked.proposal_hash)
        assert done.request.status is Status.EXECUTED, done.request.outcome
        inside = await gw.submit(run.id, "psu", "VOLT 1,(@1)")
        assert inside.status == "executed", inside
    finally:
        await gw.close()
        gw.store.close()
    before = dp832_volts(other)
    gw = await restarted(swapped(sim, other), db_path, clock)
    try:
        result = await gw.submit(run.id, "psu", "SOUR1:VOLT 3")
        assert result.status == "pending", result  # a person decides, not the plan
        assert dp832_volts(other) == before
    finally:
        await gw.close()
        gw.store.close()
    assert dp832_volts(other) == before


async def test_a_setpoint_approved_on_one_instrument_covers_no_output_enable_on_another(
        config: BenchConfig, db_path: Path, clock: Clock, sim: SimBenchThread,
        other: SimServedThread, script: Principal, olga: Principal, front_panel: object
        ) -> None:
    gw = await restarted(config, db_path, clock)
    try:
        run = gw.create_run(script, "script", goal="bring up CH1")
        held = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
        assert held is not None
        done = await gw.grant(held.id, olga, ["setpoint"], proposal_hash=held.proposal_hash)
        assert done.request.status is Status.EXECUTED, done.request.outcome
        amps = gw.get_request(held.id).receipt
        assert amps is not None
        current = amps.after["ch1.current"]
    finally:
        await gw.close()
        gw.store.close()
    # The DP832's CH1 happens to be at the very levels approved on the E36312A's.
    with own_port(other.resource_name, panel=True) as res:
        res.write(f"SOUR1:VOLT 2;:SOUR1:CURR {current}")
    gw = await restarted(swapped(sim, other), db_path, clock)
    try:
        on = (await gw.submit(run.id, "psu", "OUTP CH1,ON")).request
        assert on is not None
        assert "setpoint" in {k.value for k in on.required}, on.required
        done = await gw.grant(on.id, olga, ["output_enable"], proposal_hash=on.proposal_hash)
        assert done.request.status is Status.PENDING, done.request.outcome
    finally:
        await gw.close()
        gw.store.close()
    with own_port(other.resource_name) as res:
        assert res.query("OUTP? CH1") == "OFF"
