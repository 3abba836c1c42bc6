"""The DP832's trigger input (DP800 Programming Guide, :TRIGger:IN[:ENABle] and
:TRIGger:IN:RESPonse): a data line of the rear digital I/O, once enabled, switches its
source channel's output on (ON), off (OFF) or over (ALTER) whenever its input signal meets
the trigger type. That happens long after the read-back that judged the command, with no
output enable and at whatever levels the channel holds then (one set at the panel beyond
the envelope, say). Unknown to the profile, these were held and ran with every approval;
now a line is only ever disabled and its response only ever OFF (-224). Proved on the
simulator's own port, where ``SIM:EDGE D0`` is the signal arriving at line D0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal

import pytest

from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.scpi import classify
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import own_port, served_bench
from tests.core.test_review_holes_2 import _everything

from .test_dp832 import LIMITS  # the DP832 bench's envelope


@pytest.fixture
def dp832_sim() -> Iterator[SimServedThread]:
    with SimServedThread("dp832") as served:
        yield served


@pytest.fixture
def config(sim: SimBenchThread, dp832_sim: SimServedThread) -> BenchConfig:
    cfg = served_bench(sim, "dp832", dp832_sim, "dp832", LIMITS)
    cfg.policy.watch_seconds = 0  # the primary defence, not the watch's bound
    return cfg


def _ch1(served: SimServedThread) -> tuple[Decimal, str]:
    """What CH1's DUT sees on the simulator's own port: volts, output."""
    with own_port(served.resource_name) as res:
        return Decimal(res.query("MEAS:VOLT? CH1")), res.query("OUTP? CH1")


def test_the_simulated_dp832_switches_an_output_on_at_an_edge(
        dp832_sim: SimServedThread) -> None:
    """The model the test below relies on: an enabled line with response ON switches its
    source channel on at an edge; a disabled line does nothing."""
    with own_port(dp832_sim.resource_name, panel=True) as res:
        res.write("SOUR1:CURR 0.5;:SOUR1:VOLT 3;:SIM:EDGE D0")
        assert res.query("OUTP? CH1") == "OFF"  # not enabled
        dp832_sim.instrument.execute("TRIG:IN:RESP D0,ON", False)
        dp832_sim.instrument.execute("TRIG:IN D0,ON", False)
        assert res.query("TRIG:IN? D0") == "ON" and res.query("TRIG:IN:RESP? D0") == "ON"
        res.write("SIM:EDGE D0")
        assert res.query("OUTP? CH1") == "ON"
        assert res.query("SYST:ERR?") == '0,"No error"'


@pytest.mark.parametrize("arm", [
    ["TRIG:IN:RESP D0,ON", "TRIG:IN D0,ON"],
    ["TRIGger:IN:RESPonse D0,ALTER", "TRIGger:IN:ENABle D0,ON"],
    ["TRIG:IN:RESP D0,ON;:TRIG:IN:SOUR D0,CH1;:TRIG:IN D0,1"],
])
async def test_a_trigger_input_never_switches_an_output_on_later(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        dp832_sim: SimServedThread, arm: list[str]) -> None:
    """CH1 off, at 30 V set at the panel (beyond its 12 V envelope, harmless while off).
    Arming line D0 to switch CH1 on is refused (-224) however it is spelled: with every
    approval it read back CH1 off, and the next edge at D0 gave the DUT 30 V."""
    with own_port(dp832_sim.resource_name, panel=True) as panel:
        panel.write("SOUR1:CURR 0.5;:SOUR1:VOLT 30")
        assert panel.query("*OPC?") == "1"
    run = gateway.create_run(script, "script", goal="switch on from the fixture")
    results = [await _everything(gateway, run.id, "dp832", m, olga, pete) for m in arm]
    with own_port(dp832_sim.resource_name, panel=True) as panel:
        armed = panel.query("TRIG:IN? D0"), panel.query("TRIG:IN:RESP? D0")
        panel.write("SIM:EDGE D0")  # the fixture's signal arrives
        assert panel.query("*OPC?") == "1"
    assert _ch1(dp832_sim) == (Decimal(0), "OFF"), results
    assert armed == ("OFF", "OFF")
    for message, result in zip(arm, results, strict=True):
        assert getattr(result, "status", None) == "refused" and result.code == -224, \
            (message, result)


async def test_disarming_a_trigger_input_passes_as_a_state_change(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        dp832_sim: SimServedThread) -> None:
    """Disabling a line, or setting its response to OFF, only ever switches an output off:
    held as a state change, and it runs; the query is a read."""
    run = gateway.create_run(script, "script", goal="disarm the trigger input")
    for message in ("TRIG:IN D0,OFF", "TRIG:IN:RESP D1,OFF"):
        done = await _everything(gateway, run.id, "dp832", message, olga, pete)
        assert done.request.status.value == "executed", (message, done.request.outcome)
    assert classify("TRIG:IN? D2;:TRIG:IN:RESP? D3", "dp832").read_only


@pytest.mark.parametrize("message", ["TRIG:IN OFF", "TRIG:IN:RESP OFF"])
def test_a_trigger_input_names_its_line(message: str) -> None:
    """Left out, the line would mean the panel's selected one: the gateway wants it named."""
    with pytest.raises(Exception, match="-109"):
        classify(message, "dp832")


async def test_a_triggered_level_never_reaches_a_tracking_channel_outside(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        dp832_sim: SimServedThread) -> None:
    """DP800 guide, :OUTPut:TRACk: while tracking is on, the other channel's voltage setting
    follows CH1's whenever it changes, a trigger's change included. CH2 on at 3 V under its
    6 V envelope, CH1 off, tracking on; ``:SOUR1:VOLT:TRIG 10`` is inside CH1's 12 V. The
    trigger (every approval) read back 3 V, and a second later CH2 gave its DUT 10 V. Now
    the level is judged on every channel a coupling carries it to: storing it is refused
    (-222), and with it stored at the panel, so is the trigger."""
    run = gateway.create_run(script, "script", goal="a tracked step")
    for message in (":SOUR2:CURR 0.2;:SOUR2:VOLT 3;:SOUR1:CURR 0.2;:SOUR1:VOLT 3;:OUTP CH2,ON",
                    ":OUTP:TRAC CH1,ON"):
        done = await _everything(gateway, run.id, "dp832", message, olga, pete)
        assert done.request.status.value == "executed", (message, done.request.outcome)
    stored = await _everything(gateway, run.id, "dp832", ":SOUR1:VOLT:TRIG 10", olga, pete)
    with own_port(dp832_sim.resource_name, panel=True) as panel:
        panel.write(":SOUR1:VOLT:TRIG 10")  # stored at the panel, if not through the gateway
        assert panel.query("*OPC?") == "1"
    results = [stored, *[await _everything(gateway, run.id, "dp832", m, olga, pete)
                         for m in (":TRIG", "*TRG")]]
    await asyncio.sleep(1.3)  # the trigger delay: 1 s
    with own_port(dp832_sim.resource_name) as res:
        ch2 = Decimal(res.query("MEAS:VOLT? CH2")), res.query("OUTP? CH2")
    assert ch2 == (Decimal(3), "ON"), results
    for result in results:
        assert getattr(result, "status", None) == "refused" and result.code == -222, result
        assert "CH2 triggered voltage" in result.reason, result.reason


async def test_without_tracking_a_triggered_level_is_judged_on_its_own_channel(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        dp832_sim: SimServedThread) -> None:
    """The same with tracking off (read as OFF on both channels): the trigger runs, CH1
    (off) takes 10 V and CH2 keeps its 3 V."""
    run = gateway.create_run(script, "script", goal="an untracked step")
    for message in (":SOUR2:CURR 0.2;:SOUR2:VOLT 3;:SOUR1:CURR 0.2;:SOUR1:VOLT 3;:OUTP CH2,ON",
                    ":SOUR1:VOLT:TRIG 10", ":TRIG"):
        done = await _everything(gateway, run.id, "dp832", message, olga, pete)
        assert done.request.status.value == "executed", (message, done.request.outcome)
    await asyncio.sleep(1.3)
    with own_port(dp832_sim.resource_name) as res:
        assert Decimal(res.query("SOUR1:VOLT?")) == 10
        assert (Decimal(res.query("MEAS:VOLT? CH2")), res.query("OUTP? CH2")) == (3, "ON")


@pytest.mark.parametrize(("setup", "message"), [
    ([":OUTP:TRAC CH1,ON"], ":SOUR1:VOLT:TRIG 10;:TRIG"),  # stored in the trigger's message
    ([":SOUR1:VOLT:TRIG 10"], ":OUTP:TRAC CH1,ON;:TRIG"),  # tracking on in its message
    ([":SOUR1:VOLT:TRIG 10"], ":OUTP:TRAC CH2,ON;*TRG"),
])
async def test_tracking_and_a_trigger_in_one_message_never_carry_a_level_outside(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        dp832_sim: SimServedThread, setup: list[str], message: str) -> None:
    """As above, with the level stored or the tracking switched on in the trigger's own
    message, where the snapshot from before it shows neither: refused (-222)."""
    run = gateway.create_run(script, "script", goal="a tracked step in one message")
    for text in [":SOUR2:CURR 0.2;:SOUR2:VOLT 3;:SOUR1:CURR 0.2;:SOUR1:VOLT 3;:OUTP CH2,ON",
                 *setup]:
        done = await _everything(gateway, run.id, "dp832", text, olga, pete)
        assert done.request.status.value == "executed", (text, done.request.outcome)
    result = await _everything(gateway, run.id, "dp832", message, olga, pete)
    await asyncio.sleep(1.3)
    with own_port(dp832_sim.resource_name) as res:
        ch2 = Decimal(res.query("MEAS:VOLT? CH2")), res.query("OUTP? CH2")
    assert ch2 == (Decimal(3), "ON"), result
    assert getattr(result, "status", None) == "refused" and result.code == -222, result
