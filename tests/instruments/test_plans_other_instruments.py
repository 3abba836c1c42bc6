"""Standing plans on the shipped profiles other than the E36312A (docs/plans.md), each
through a gateway in front of its served simulator, the real state read on the simulator's
own port."""

from __future__ import annotations

import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bench_gate.config import ChannelLimits
from bench_gate.errors import InvalidInput
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import Clock, own_port, served_bench

SCOPE = {"instrument": "dev", "voltage": [0, 5], "current_max": 0.5, "max_step": 1,
         "output_enable": True, "max_writes": 40, "timeout_minutes": 30}


@pytest.fixture
def spd() -> Iterator[SimServedThread]:
    with SimServedThread("spd3303x") as served:
        yield served


async def gateway_for(sim: SimBenchThread, served: SimServedThread, profile: str,
                      limits: dict[int, ChannelLimits], tmp: Path) -> Gateway:
    gw = Gateway(served_bench(sim, "dev", served, profile, limits), SqliteStore(tmp / "b.db"),
                 clock=Clock())
    await gw.start()
    return gw


async def test_a_plan_over_the_spd3303x_fixed_output_is_a_clear_422_not_a_timeout(
        sim: SimBenchThread, spd: SimServedThread, tmp_path: Path, script: Principal) -> None:
    """CH3 of the SPD3303X is fixed (2.5, 3.3 or 5 V by its switch) and has no setpoint:
    a plan's "voltage from 0 to 1 V" would bound nothing there. The request used to read
    CH3:VOLT? for its snapshot, which the supply never answers: a timeout blamed on the
    instrument after seconds, instead of a refusal of the scope naming the field."""
    gw = await gateway_for(sim, spd, "spd3303x",
                           {1: ChannelLimits(voltage=Decimal(12), current=Decimal(1))}, tmp_path)
    try:
        run = gw.create_run(script, "script", goal="CH3 plan")
        started = time.monotonic()
        with pytest.raises(InvalidInput) as refused:
            await gw.request_plan(run.id, {**SCOPE, "channels": [3], "voltage": [0, 1]})
        assert refused.value.field == "channels"
        assert "CH3 has no voltage or current setpoint" in refused.value.message
        assert time.monotonic() - started < 1.5  # refused at once, nothing asked of CH3
        assert gw.list_plans(run.id) == []
        assert gw.list_requests(status=Status.PENDING) == []
        with own_port(spd.resource_name) as panel:  # nothing switched on
            assert int(panel.query("SYST:STAT?"), 16) >> 4 & 0b11 == 0
    finally:
        await gw.close()
        gw.store.close()


async def approved(gw: Gateway, run_id: str, channels: list[int], olga: Principal,
                   pete: Principal) -> str:
    req = await gw.request_plan(run_id, {**SCOPE, "channels": channels})
    await gw.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    done = await gw.grant(req.id, pete, ["output_enable"], proposal_hash=req.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.request.outcome
    assert req.plan_id is not None
    return req.plan_id


# Per profile: the channel the plan names, writes inside it (by prefix, by selection, by
# parameter), writes that leave it (another channel however addressed, a step spread over
# one message, a level above the plan, *RCL), and the channel's levels on the sim's port.
SUPPLIES: dict[str, Any] = {
    "spd3303x": ("spd3303x", {1: ChannelLimits(voltage=Decimal(12), current=Decimal(1)),
                              2: ChannelLimits(voltage=Decimal(12), current=Decimal(1))},
                 ["CH1:CURR 0.2", "CH1:VOLT 1", "OUTP CH1,ON", "INST CH2;:CH1:VOLT 2"],
                 ["INST CH2;VOLT 3", "CH2:VOLT 1", "OUTP CH2,ON", "CH1:VOLT 4;:CH1:VOLT 5",
                  "CH1:CURR 0.6", "*RCL 1"],
                 ["CH1:VOLT?", "CH1:CURR?", "CH2:VOLT?"]),
    "dp832": ("dp832", {ch: ChannelLimits(voltage=Decimal(12), current=Decimal(1))
                        for ch in (1, 2, 3)},
              [":SOUR1:CURR 0.2", ":APPL CH1,1", ":OUTP CH1,ON", ":INST CH1;:VOLT 2"],
              [":APPL CH2,1,0.1", ":INST CH2;:VOLT 1", ":INST:NSEL 2;:OUTP ON",
               ":APPL CH1,4;:APPL CH1,5", ":APPL CH1,2,0.6", ":OUTP:TRAC CH1,ON", "*RCL 1"],
              [":SOUR1:VOLT?", ":SOUR1:CURR?", ":SOUR2:VOLT?"]),
    "e3631a": ("e3631a", {ch: ChannelLimits(voltage=Decimal(12), current=Decimal(1))
                          for ch in (1, 2, 3)},
               ["INST P25V", "CURR 0.2", "APPL P25V,1", "VOLT 2"],
               ["OUTP ON", "INST P6V;VOLT 1", "APPL N25V,-1,0.1", "APPL P25V,4;:APPL P25V,5",
                "OUTP:TRAC ON", "*RCL 1"],
               ["INST:NSEL 2;:VOLT?", "INST:NSEL 2;:CURR?", "INST:NSEL 1;:VOLT?"]),
    "dl3021": ("dl3021", {1: ChannelLimits(voltage=Decimal(20), current=Decimal(2))},
               [":CURR 0.2", ":INP ON", ":CURR 0.4", ":VOLT MIN"],
               [":CURR 0.6", ":FUNC VOLT", ":RES 1", ":VOLT:ILIM 1", "*RCL 1"],
               [":CURR?", ":VOLT?", ":FUNC?"]),
    # The SMU: the plan's current is the current limit while sourcing voltage (ILIM); the
    # other function's levels are not the plan's to set, and its output enable is judged on
    # them too: VLIM at its default 21 V is above the plan's 5 V, so OUTP ON waits.
    "k2450": ("k2450", {1: ChannelLimits(voltage=Decimal(25), current=Decimal(1))},
              [":SOUR:VOLT:ILIM 0.05", ":SOUR:VOLT 1", ":SOUR1:VOLT:LEV:IMM:AMPL 2"],
              [":OUTP ON", ":SOUR:CURR 0.1", ":SOUR:CURR:VLIM 4", ":SOUR:FUNC CURR",
               ":SOUR:VOLT:ILIM 0.6", ":SOUR:VOLT 4;:SOUR:VOLT 5", ":SOUR:VOLT:RANG 20",
               "*RCL 1"],
              [":SOUR:VOLT?", ":SOUR:VOLT:ILIM?", ":SOUR:CURR?", ":SOUR:FUNC?", ":OUTP?"]),
}
SIMULATED = {"k2450": "smu"}  # sim_instruments.EXTRA names the 2450 by its kind


@pytest.mark.parametrize("name", list(SUPPLIES))
async def test_a_plan_runs_inside_its_scope_and_holds_the_rest(
        name: str, sim: SimBenchThread, tmp_path: Path, script: Principal, olga: Principal,
        pete: Principal) -> None:
    profile, limits, inside, outside, levels = SUPPLIES[name]
    channel = 2 if profile == "e3631a" else 1
    with SimServedThread(SIMULATED.get(profile, profile)) as served:
        gw = await gateway_for(sim, served, profile, limits, tmp_path)
        try:
            run = gw.create_run(script, "script", goal=f"{profile} plan")
            await approved(gw, run.id, [channel], olga, pete)
            for message in inside:
                result = await gw.submit(run.id, "dev", message)
                assert result.status == "executed", (message, result.reason)
            with own_port(served.resource_name) as panel:
                before = [panel.query(q) for q in levels]
                for message in outside:
                    result = await gw.submit(run.id, "dev", message)
                    assert result.status != "executed", message
                    if result.request is not None:
                        await gw.cancel(result.request.id, script)
                    assert [panel.query(q) for q in levels] == before, message
        finally:
            await gw.close()
            gw.store.close()
