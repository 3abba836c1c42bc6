"""A lease on an energized output outlives a bench.toml edit (bench_gate/leases.py): the
bench renamed, or the instrument renamed, between the write that switched the output on
and its client going away. The lease was kept under the old names, which no gateway
served any more: nobody ran it out, and the output stayed on with no client (or the
journal said it was switched off while it was not). A lease names the instrument it was
taken on (its resource and ``*IDN?``), as a stop does, and the gateway that now has that
instrument runs it out. Proven on the simulator's own port."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import pyvisa

from bench_gate.config import BenchConfig, ChannelLimits, InstrumentConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import Clock

LEASE = 1.0


async def energize(config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
                   olga: Principal, front_panel: Any) -> str:
    """CH1 switched on by a run, through an approved write; then the gateway stops."""
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script", goal="bring up CH1")
        held = (await gw.submit(run.id, "psu", "VOLT 2,(@1);:OUTP ON,(@1)")).request
        assert held is not None
        done = await gw.grant(held.id, olga, [k.value for k in held.required],
                              proposal_hash=held.proposal_hash)
        assert done.request.status is Status.EXECUTED, done.request.outcome
    finally:
        await gw.close()
        gw.store.close()
    assert front_panel.query("OUTP? (@1)") == "1"
    return run.id


def port(resource_name: str) -> Any:
    """A simulator's own port, opened beside the front panel's (closing a resource manager
    would close that one too)."""
    return pyvisa.ResourceManager("@py").open_resource(
        resource_name, read_termination="\n", write_termination="\n", timeout=2000)


async def switched_off(front_panel: Any, seconds: float) -> bool:
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        if front_panel.query("OUTP? (@1)") == "0":
            return True
        await asyncio.sleep(0.2)
    return False


@pytest.mark.parametrize("edit", ["bench renamed", "instrument renamed"])
async def test_a_lease_runs_out_under_the_names_bench_toml_gives_now(
        edit: str, config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    config.policy.lease_seconds = LEASE
    run_id = await energize(config, db_path, clock, script, olga, front_panel)
    if edit == "bench renamed":
        edited = config.model_copy(update={"bench": "lab-3 bench A"})
    else:
        edited = config.model_copy(deep=True)
        edited.instruments[0].name = "supply"
        edited.envelope["supply"] = edited.envelope.pop("psu")
    gw = Gateway(edited, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        assert await switched_off(front_panel, LEASE + 4.0), "the output stayed on"
        await asyncio.sleep(0.5)  # its journal event, then the lease goes
        assert gw.leases() == []
        expired = [e.data for e in gw.store.recent(run_id, limit=50)
                   if e.type.value == "lease_expired"]
        assert expired and expired[-1]["instrument"] == edited.instruments[0].name, expired
        assert expired[-1]["errors"] == [] and expired[-1]["sent"], expired
    finally:
        await gw.close()
        gw.store.close()


async def test_a_lease_switches_off_its_own_instrument_when_bench_toml_swaps_names(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any, sim: SimBenchThread) -> None:
    """``psu`` and ``aux`` exchange resources: the lease taken on the E36312A (``psu``
    then, ``aux`` now) switches the E36312A off, not the DP832 now called ``psu``."""
    config.policy.lease_seconds = LEASE
    with SimServedThread("dp832") as other:
        config.instruments.append(InstrumentConfig(name="aux", resource=other.resource_name,
                                                   profile="dp832", socket_port=0))
        config.envelope["aux"] = {1: ChannelLimits(voltage=Decimal(6), current=Decimal(1))}
        run_id = await energize(config, db_path, clock, script, olga, front_panel)
        dp832 = port(other.resource_name)  # its own port: someone else's DUT, on
        dp832.write("SIM:PANEL")
        dp832.write("SOUR1:VOLT 1;:OUTP CH1,ON")
        edited = config.model_copy(deep=True)
        edited.instruments[0].name, edited.instruments[2].name = "aux", "psu"
        edited.envelope = {"aux": config.envelope["psu"], "psu": config.envelope["aux"]}
        gw = Gateway(edited, SqliteStore(db_path), clock=clock)
        await gw.start()
        try:
            assert await switched_off(front_panel, LEASE + 4.0), "the E36312A stayed on"
            await asyncio.sleep(0.5)
            expired = [e.data for e in gw.store.recent(run_id, limit=50)
                       if e.type.value == "lease_expired"]
            assert [e["instrument"] for e in expired] == ["aux"], expired
        finally:
            await gw.close()
            gw.store.close()
        try:
            assert dp832.query("OUTP? CH1") == "ON", "the DP832 was switched off instead"
        finally:
            dp832.close()
