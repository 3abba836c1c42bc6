"""An emergency stop outlives a bench.toml edit that swaps two instruments' names (the
resources of ``psu`` and ``aux`` exchanged) and a restart. The stop is kept under the name
it was pressed on, with the instrument's resource and ``*IDN?``; a stop of this bench was
looked for under the instrument's current names only, so the stopped supply, now called
``aux``, took a write, and the other one, now called ``psu``, was refused. A stop stays
with its instrument, whatever it is called now. Proven on the simulator's own port."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

from bench_gate.config import BenchConfig, ChannelLimits, InstrumentConfig, default_config
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import Clock

E36312A = {1: ChannelLimits(voltage=Decimal(6), current=Decimal(1))}
DP832 = {1: ChannelLimits(voltage=Decimal(6), current=Decimal(1))}


def bench(sim: SimBenchThread, other: SimServedThread, *, swapped: bool) -> BenchConfig:
    cfg = default_config(sim.psu_port, sim.dmm_port)
    e36312a = InstrumentConfig(name="psu", resource=sim.psu_resource_name, profile="e36312a",
                               socket_port=0)
    dp832 = InstrumentConfig(name="aux", resource=other.resource_name, profile="dp832",
                             socket_port=0)
    if swapped:
        e36312a.name, dp832.name = "aux", "psu"
    cfg.instruments = [e36312a, dp832, cfg.instruments[1]]
    cfg.envelope = {e36312a.name: dict(E36312A), dp832.name: dict(DP832)}
    return cfg


async def test_a_stop_stays_with_its_instrument_when_bench_toml_swaps_names(
        sim: SimBenchThread, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    with SimServedThread("dp832") as other:
        gw = Gateway(bench(sim, other, swapped=False), SqliteStore(db_path), clock=clock)
        await gw.start()
        try:
            await gw.emergency_stop(olga, "api", "psu")  # the E36312A
        finally:
            await gw.close()
            gw.store.close()
        gw = Gateway(bench(sim, other, swapped=True), SqliteStore(db_path), clock=clock)
        await gw.start()
        try:
            run = gw.create_run(script, "script", goal="CH1 up")
            result = await gw.submit(run.id, "aux", "VOLT 2,(@1)")  # the stopped E36312A
            if result.request is not None:  # held: as the operator of the moment would
                held = result.request
                await gw.grant(held.id, olga, [k.value for k in held.required],
                               proposal_hash=held.proposal_hash)
            assert Decimal(front_panel.query("VOLT? (@1)")) == 0, "the stopped supply took it"
            assert result.status == "refused" and "aux is stopped" in result.reason, result
            assert set(gw.stopped()) == {"aux"}  # the DP832, psu now, was never stopped
        finally:
            await gw.close()
            gw.store.close()
    assert Decimal(front_panel.query("VOLT? (@1)")) == 0


async def test_a_stop_of_a_renamed_bench_is_listed_and_cleared_under_its_new_name(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    """bench.toml renames the bench: the stop pressed under the old name still refuses
    writes to its supply (the same resource), and it is this bench's now: listed, and
    cleared by an operator here (it was neither: "psu is not stopped")."""
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        await gw.emergency_stop(olga, "api", "psu")
    finally:
        await gw.close()
        gw.store.close()
    renamed = config.model_copy(update={"bench": "lab-3 bench A"})
    gw = Gateway(renamed, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script", goal="CH1 up")
        refused = await gw.submit(run.id, "psu", "VOLT 2,(@1)")
        assert refused.status == "refused" and "stopped" in refused.reason, refused
        assert set(gw.stopped()) == {"psu"}
        assert gw.clear_stop(olga, "psu") == ["psu"]
        held = (await gw.submit(gw.create_run(script, "script").id, "psu",
                                "VOLT 2,(@1)")).request
        assert held is not None, "still stopped after the clear"
        done = await gw.grant(held.id, olga, ["setpoint"], proposal_hash=held.proposal_hash)
        assert done.request.status.value == "executed", done.request.outcome
    finally:
        await gw.close()
        gw.store.close()
    assert Decimal(front_panel.query("VOLT? (@1)")) == 2


async def test_a_stop_of_an_instrument_with_two_names_stays_under_its_name_after_a_restart(
        sim: SimBenchThread, db_path: Path, clock: Clock, olga: Principal) -> None:
    """The DP832 is on the bench twice under one resource (``aux`` and ``aux2``): the stop
    pressed on ``aux`` (kept under both names) is kept under both after a restart, not
    moved to one of them."""
    with SimServedThread("dp832") as other:
        cfg = bench(sim, other, swapped=False)
        cfg.instruments.append(InstrumentConfig(name="aux2", resource=other.resource_name,
                                                profile="dp832", socket_port=0))
        for _ in range(2):
            gw = Gateway(cfg, SqliteStore(db_path), clock=clock)
            await gw.start()
            try:
                if not gw.stopped():
                    await gw.emergency_stop(olga, "api", "aux")
                else:
                    assert set(gw.stopped()) == {"aux", "aux2"}
                    assert gw.clear_stop(olga, "aux") == ["aux"]
            finally:
                await gw.close()
                gw.store.close()
