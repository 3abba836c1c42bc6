"""The envelope holds at the DUT, not only at the levels: a setting that moves where the
source regulates (the 2450's remote sense, 4-wire) is a mode in which the levels bound
nothing the gateway can read, so with every approval given it still never leaves an
energized channel outside the envelope.

2450 Reference Manual, [:SENSe[1]]:<function>:RSENse: in 4-wire "the voltage source
increases the voltage until the sensed voltage is the same as the programmed amplitude"; with
only the force leads on the DUT (the simulated bench) it drives the top of its range. Every
reading the gateway takes (the levels, the limits) stays inside while the DUT sees 21 V.
"""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest

from bench_gate.config import BenchConfig, ChannelLimits
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from sim_instruments import SimBenchThread, SimServedThread, SimSmu
from tests.conftest import own_port, served_bench
from tests.core.test_review_holes_2 import _everything
from tests.instruments import test_k2450

smu_sim = test_k2450.smu_sim
LIMITS = {1: ChannelLimits(voltage=Decimal(10), current=Decimal("0.1"))}
ON_AT_3V = ":SOUR:FUNC VOLT;:SOUR:CURR:VLIM 5;:SOUR:VOLT:ILIM 0.1;:SOUR:VOLT 3;:OUTP ON"


@pytest.fixture
def config(sim: SimBenchThread, smu_sim: SimServedThread) -> BenchConfig:
    return served_bench(sim, "smu", smu_sim, "k2450", LIMITS)


def terminals(smu_sim: SimServedThread) -> tuple[float, float]:
    inst = smu_sim.instrument
    assert isinstance(inst, SimSmu)
    return inst.terminals()


@pytest.mark.parametrize("function", ["VOLT", "CURR", "RES"])
async def test_remote_sense_never_drives_the_dut_outside_with_every_approval(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        smu_sim: SimServedThread, function: str) -> None:
    """The 2450 on at 3 V into 1 kOhm under a 10 V envelope; ``:SENS:<f>:RSEN ON`` with
    every approval given. It was executed and the read-back, reading 3 V, said inside while
    the DUT saw 21 V. Now the write is refused before it is sent (remote sense on an
    energized channel is outside), and the output stays at 3 V."""
    run = gateway.create_run(script, "script", goal="4-wire readings")
    done = await _everything(gateway, run.id, "smu", ON_AT_3V, olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    if function != "VOLT":
        await gateway.submit(run.id, "smu", f':SENS:FUNC "{function}"')
    result = await _everything(gateway, run.id, "smu", f":SENS:{function}:RSEN ON", olga, pete)
    volts, _ = terminals(smu_sim)
    assert volts <= 10.0, f"the DUT sees {volts} V under a 10 V envelope: {result}"
    assert getattr(result, "status", None) == "refused" and result.code == -222, result
    with own_port(smu_sim.resource_name) as res:
        assert res.query(f":SENS:{function}:RSEN?") == "0"


async def test_remote_sense_set_at_the_panel_is_made_safe_and_blocks_an_energize(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        smu_sim: SimServedThread) -> None:
    """Remote sense switched on at the panel (the one change the gateway cannot refuse):
    an output enable is refused before it is sent, and on an energized channel the envelope
    watch finds it and switches the output off."""
    run = gateway.create_run(script, "script", goal="4-wire readings")
    with own_port(smu_sim.resource_name, panel=True) as panel:
        panel.write(":SENS:CURR:RSEN ON")
        assert panel.query(":SENS:CURR:RSEN?") == "1"
    result = await _everything(gateway, run.id, "smu", ON_AT_3V, olga, pete)
    assert getattr(result, "status", None) == "refused" and result.code == -222, result
    assert "remote sense" in result.reason, result.reason
    assert terminals(smu_sim) == (0.0, 0.0)
    with own_port(smu_sim.resource_name, panel=True) as panel:
        panel.write(":SENS:CURR:RSEN OFF")
        assert panel.query(":SENS:CURR:RSEN?") == "0"
    done = await _everything(gateway, run.id, "smu", ON_AT_3V, olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    with own_port(smu_sim.resource_name, panel=True) as panel:
        panel.write(":SENS:VOLT:RSEN ON")
        assert panel.query(":SENS:VOLT:RSEN?") == "1"
    assert terminals(smu_sim)[0] > 10.0  # the panel did it: the DUT sees the range's top
    for _ in range(100):  # the envelope watch (policy.watch_seconds, 1 s) makes it safe
        if terminals(smu_sim) == (0.0, 0.0):
            break
        await asyncio.sleep(0.05)
    assert terminals(smu_sim) == (0.0, 0.0)
    with own_port(smu_sim.resource_name, panel=True) as panel:
        assert panel.query(":OUTP?") == "0"


@pytest.mark.parametrize("message", [":VOLT:RSEN ON", ":SENS1:VOLT:RSEN ON",
                                     ":sense1:voltage:dc:rsense 1", "CURR:RSEN 1",
                                     ":SENS1:RES:RSEN ON"])
async def test_remote_sense_in_the_manuals_other_spellings_is_judged_before_it_is_sent(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        smu_sim: SimServedThread, message: str) -> None:
    """2450 Reference Manual, section 6, ``[:SENSe[1]]:<function>:RSENse``: the SENSe node is
    optional and takes the suffix 1. The profile knew only ``SENSe:...:RSENse``, so
    ``:VOLT:RSEN ON`` was a header it did not know, held for every approval and sent blind
    (on a 2450, 4-wire on an energized output: the DUT at the range's top until the
    read-back), and ``:SENS1:VOLT:RSEN ON`` was refused as a syntax error (-114). Each
    spelling is now the remote-sense field, judged before it is sent: refused (-222)."""
    run = gateway.create_run(script, "script", goal="4-wire readings")
    done = await _everything(gateway, run.id, "smu", ON_AT_3V, olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    result = await _everything(gateway, run.id, "smu", message, olga, pete)
    assert getattr(result, "status", None) == "refused" and result.code == -222, result
    assert "remote sense" in result.reason, result.reason
    with own_port(smu_sim.resource_name) as res:
        for function in ("VOLT", "CURR", "RES"):
            assert res.query(f":SENS:{function}:RSEN?") == "0"
        assert res.query(":OUTP?") == "1"
    assert terminals(smu_sim)[0] == pytest.approx(3.0)
