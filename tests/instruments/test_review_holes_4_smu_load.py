"""The fourth hostile review, continued: the Keithley 2450 and the Rigol DL3021 against their
manuals (tests/instruments/test_review_holes_4.py has the supplies). Each attack is tried
through the gateway with every approval a careless operator would give, and the result is read
on the simulator's own model of what reaches the DUT.

2. a measure setting that moves the source: the 2450's remote sense (``:SENS:VOLT:RSEN ON``)
   was measure-config, but its manual says the voltage source regulates at the SENSE
   terminals in 4-wire, so with nothing wired there the force voltage runs away.
3. a mode no level bounds: the DL3021's short circuit (``:INP:SHOR ON``) draws all the DUT
   gives, whatever the CC level the read-back judges.
4. a level applied after the read-back, on the load: the DL3021's list mode (``:FUNC:MODE
   LIST``, then a trigger) draws each step's level (``:LIST:LEV``, a header the profile does
   not know) long after the read-back.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from decimal import Decimal

import pytest

from bench_gate.config import BenchConfig, ChannelLimits, InstrumentConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from sim_instruments import SimBenchThread, SimDl3021, SimServedThread, SimSmu
from tests.conftest import own_port, served_bench
from tests.core.test_review_holes_2 import _everything
from tests.instruments import test_k2450

smu_sim = test_k2450.smu_sim
SMU_LIMITS = {1: ChannelLimits(voltage=Decimal(10), current=Decimal("0.1"))}
LOAD_LIMITS = {1: ChannelLimits(voltage=Decimal(20), current=Decimal(10))}


@pytest.fixture
def load_sim() -> Iterator[SimServedThread]:
    with SimServedThread("dl3021") as served:
        yield served


@pytest.fixture
def config(sim: SimBenchThread, smu_sim: SimServedThread,
           load_sim: SimServedThread) -> BenchConfig:
    cfg = served_bench(sim, "smu", smu_sim, "k2450", SMU_LIMITS)
    cfg.instruments.append(InstrumentConfig(name="load", resource=load_sim.resource_name,
                                            profile="dl3021", socket_port=0))
    cfg.envelope["load"] = dict(LOAD_LIMITS)
    return cfg


# ------------------------------------------------------------------ 2. remote sense
def _smu_terminals(smu_sim: SimServedThread) -> tuple[float, float]:
    inst = smu_sim.instrument
    assert isinstance(inst, SimSmu)
    return inst.terminals()


@pytest.mark.parametrize("function", ["VOLT", "CURR", "RES"])
async def test_the_2450s_remote_sense_never_passes_unattended(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        smu_sim: SimServedThread, function: str) -> None:
    """The 2450 sourcing 3 V (ILIM 0.1 A) into 1 kOhm, on, under a 10 V / 0.1 A envelope.
    ``:SENS:<function>:RSEN ON`` was measure-config and passed unattended; 2450 Reference
    Manual, [:SENSe[1]]:<function>:RSENse: in 4-wire "the voltage source increases the
    voltage until the sensed voltage is the same as the programmed amplitude", so with only
    the force leads on the DUT it drove 21 V into it (the simulator's terminals). Remote sense
    needs every approval, and the handoff says why; on an energized output it is refused
    before it is sent (tests/instruments/test_envelope_sense.py: with every approval it
    still drove 21 V, every level read back inside)."""
    run = gateway.create_run(script, "script", goal="4-wire voltage readings")
    done = await _everything(gateway, run.id, "smu",
                             ":SOUR:FUNC VOLT;:SOUR:CURR:VLIM 5;:SOUR:VOLT:ILIM 0.1;"
                             ":SOUR:VOLT 3;:OUTP ON",
                             olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    if function != "VOLT":  # the measure function whose sense setting applies
        await gateway.submit(run.id, "smu", f':SENS:FUNC "{function}"')
    assert _smu_terminals(smu_sim) == pytest.approx((3.0, 0.003))
    result = await gateway.submit(run.id, "smu", f":SENS:{function}:RSEN ON")
    assert result.status == "refused" and result.code == -222, result
    assert "remote sense" in result.reason, result.reason
    off = await gateway.submit(run.id, "smu", ":OUTP OFF")
    assert off.status != "refused", off
    await asyncio.sleep(0)
    result = await gateway.submit(run.id, "smu", f":SENS:{function}:RSEN ON")
    assert result.status == "pending", f"remote sense passed unattended: {result}"
    assert result.request is not None and len(result.request.required) == 3
    told = json.dumps(result.request.handoff)
    assert "force voltage" in told, told  # what the approver is told
    with own_port(smu_sim.resource_name) as res:
        assert res.query(f":SENS:{function}:RSEN?") == "0"


def test_the_simulated_2450_regulates_at_its_sense_terminals(smu_sim: SimServedThread) -> None:
    """The model the test above relies on: 4-wire with nothing on SENSE runs to the range's
    top (with the current limit still clamping); sense leads on the DUT regulate there."""
    inst = smu_sim.instrument
    assert isinstance(inst, SimSmu)
    for message in (":SOUR:FUNC VOLT", ":SOUR:VOLT:ILIM 0.1", ":SOUR:VOLT 3", ":OUTP ON",
                    ":SENS:VOLT:RSEN ON"):
        inst.handle_message(message)
    assert inst.terminals() == pytest.approx((21.0, 0.021))
    inst.handle_message(":SOUR:VOLT:ILIM 0.01")
    assert inst.terminals() == pytest.approx((10.0, 0.01))
    inst.execute("SIM:SENSE 1", False)
    assert inst.terminals() == pytest.approx((3.0, 0.003))


# ------------------------------------------------------------------ 3. a mode no level bounds
def _drawn(load_sim: SimServedThread) -> tuple[float, float]:
    inst = load_sim.instrument
    assert isinstance(inst, SimDl3021)
    return inst.drawn()


@pytest.mark.parametrize("message", [":INP:SHOR ON", ":SOUR:INP:SHOR:STAT 1", "INPut:SHORt ON"])
async def test_the_dl3021_never_short_circuits_the_dut(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        load_sim: SimServedThread, message: str) -> None:
    """The DL3021 drawing 2 A (CC) from a 12 V DUT under a 10 A envelope. ``:INP:SHOR ON``
    (a header the incomplete profile did not know: held, every approval) put the load in
    short-circuit mode (DL3000 guide, [:SOURce]:INPut:SHORt: it draws as much current as it
    can, 40 A); the read-back judged the CC level and the current limits, all unchanged, and
    said "executed". No level bounds a short, so entering one is refused (-224, with why)."""
    run = gateway.create_run(script, "script", goal="a load test")
    done = await _everything(gateway, run.id, "load", ":FUNC CURR;:CURR 2;:INP ON",
                             olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    assert _drawn(load_sim) == (12.0, 2.0)
    result = await _everything(gateway, run.id, "load", message, olga, pete)
    assert getattr(result, "status", None) == "refused" and result.code == -224, result
    assert "no envelope" in result.reason, result.reason
    assert _drawn(load_sim) == (12.0, 2.0)
    with own_port(load_sim.resource_name) as res:
        assert res.query(":INP:SHOR?") == "0"
    asked = await gateway.submit(run.id, "load", ":INP:SHOR?")
    assert asked.status == "executed" and asked.response == "0", asked
    off = await gateway.submit(run.id, "load", ":INP:SHOR OFF")
    assert off.status == "pending" and len(off.request.required) == 3, off


def test_the_simulated_dl3021_short_draws_all_it_can(load_sim: SimServedThread) -> None:
    """The model the test above relies on: short-circuit mode with the input on draws the
    top of the current range (40 A, 4 A on the low range), whatever the CC level."""
    inst = load_sim.instrument
    assert isinstance(inst, SimDl3021)
    for message in (":FUNC CURR", ":CURR 2", ":INP ON"):
        inst.handle_message(message)
    inst.execute("INP:SHOR ON", False)
    assert inst.drawn() == (12.0, 40.0)
    assert inst.execute("INP:SHOR?", True) == "1"
    inst.handle_message(":CURR:RANG 4")
    assert inst.drawn() == (12.0, 4.0)
    inst.execute("INP:SHOR OFF", False)
    assert inst.drawn() == (12.0, 2.0)


# ------------------------------------------------------------------ 4. a load's list
@pytest.mark.parametrize("mode", ["LIST", "WAV", "BATT", "OCP", "OPP"])
async def test_the_dl3021_never_runs_a_list_or_test_mode(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        load_sim: SimServedThread, mode: str) -> None:
    """The DL3021 drawing 2 A (CC) from a 12 V DUT under a 10 A envelope. List steps
    ``:LIST:LEV 2,30`` (unknown: held, every approval, never judged), ``:FUNC:MODE LIST`` and
    ``:TRIG`` (every approval): the read-back after the trigger saw the fixed levels and said
    "executed", and 0.3 s later the load drew 30 A. A mode other than FIXed (list, wave,
    battery, OCP/OPP tests) applies levels no parameter here names, after the read-back: it
    is refused (-224), and so is a trigger (-203), which only ever starts such a mode (one
    set at the panel included)."""
    run = gateway.create_run(script, "script", goal="a load profile")
    done = await _everything(gateway, run.id, "load", ":FUNC CURR;:CURR 2;:INP ON",
                             olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    await _everything(gateway, run.id, "load",
                      ":LIST:LEV 1,2;:LIST:WID 1,0.3;:LIST:LEV 2,30;:LIST:WID 2,100",
                      olga, pete)
    entered = await _everything(gateway, run.id, "load", f":FUNC:MODE {mode}", olga, pete)
    assert getattr(entered, "status", None) == "refused" and entered.code == -224, entered
    assert "after the read-back" in entered.reason, entered.reason
    load_sim.instrument.execute("FUNC:MODE LIST", False)  # the panel's key
    for trigger in (":TRIG", "*TRG", ":TRIG:IMM"):
        fired = await _everything(gateway, run.id, "load", trigger, olga, pete)
        assert getattr(fired, "status", None) == "refused" and fired.code == -203, fired
    await asyncio.sleep(0.6)
    # 2 A, or nothing once the watch has found the list mode set at the panel (review 5)
    assert _drawn(load_sim) in ((12.0, 2.0), (12.0, 0.0))


def test_the_simulated_dl3021_runs_its_list_after_a_trigger(load_sim: SimServedThread) -> None:
    """The model the test above relies on: in list mode a trigger draws each step's level for
    its width, then the fixed levels again."""
    inst = load_sim.instrument
    assert isinstance(inst, SimDl3021)
    for message in (":FUNC CURR", ":CURR 2", ":INP ON"):
        inst.handle_message(message)
    for unit in ("LIST:LEV 1,5", "LIST:WID 1,0.2", "FUNC:MODE LIST", "TRIG"):
        inst.execute(unit, False)
    assert inst.drawn() == (12.0, 5.0)
    time.sleep(0.4)
    assert inst.drawn() == (12.0, 2.0)
