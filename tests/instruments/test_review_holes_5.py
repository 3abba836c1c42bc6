"""The fifth hostile review: a level stored where no write the gateway judged put it (the
front panel, ``*RCL``), then applied by a trigger after the read-back.

1. the E36312A's list (``LIST:VOLT``) and triggered levels (``VOLT:TRIG``) stored at the
   panel: ``VOLT:MODE LIST`` / ``STEP`` and ``TRIG`` through the gateway, with every
   approval, applied them; the read-back saw the first point, the later ones ran unchecked.
   Now each stored level is a field of the channel bounded by the envelope: an energized
   channel with one outside is a breach (refused before a write, made safe by the read-back
   and the watch), and a write whose effect cannot be predicted (a trigger) is never sent
   while the live state it starts from is already outside.
"""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench_gate.config import BenchConfig, ChannelLimits
from bench_gate.envelope import breaches
from bench_gate.errors import InstrumentError
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.scpi import get_profile
from bench_gate.snapshots import normalize
from sim_instruments import SimBenchThread
from tests.conftest import own_port
from tests.core.test_review_holes_2 import _everything


def _ch2(sim: SimBenchThread) -> tuple[Decimal, str]:
    """What CH2's DUT sees on the E36312A's own port: volts at the terminals, output."""
    with own_port(sim.psu_resource_name, panel=True) as res:
        return Decimal(res.query("MEAS:VOLT? (@2)")), res.query("OUTP? (@2)")


def test_the_simulated_e36312a_runs_its_list_and_triggered_levels(sim: SimBenchThread) -> None:
    """The model the tests below rely on: STEP applies VOLT:TRIG on a trigger; LIST applies
    its points one after another, each after its dwell."""
    with own_port(sim.psu_resource_name, panel=True) as res:
        res.write("SIM:LOAD 1000,(@2)")
        res.write("VOLT 1,(@2);:CURR 0.5,(@2);:OUTP 1,(@2)")
        res.write("VOLT:TRIG 4,(@2);:VOLT:MODE STEP,(@2);:TRIG (@2)")
        assert Decimal(res.query("MEAS:VOLT? (@2)")) == 4
        res.write("LIST:VOLT 2,7,(@2);:LIST:DWEL 0.2,5,(@2)")
        assert res.query("*OPC?") == "1"
        sim.psu.execute("VOLT:MODE LIST,(@2)", False)  # the panel's key: the profile refuses it
        res.write("TRIG (@2)")
        assert Decimal(res.query("MEAS:VOLT? (@2)")) == 2
    time.sleep(0.5)
    assert _ch2(sim)[0] == 7


async def _on_at_3v(gateway: Gateway, run_id: str, *people: Principal) -> None:
    done = await _everything(gateway, run_id, "psu",
                             "VOLT 3,(@2);:CURR 0.1,(@2);:OUTP 1,(@2)", *people)
    assert done.request.status.value == "executed", done.request.outcome


async def test_an_e36312a_list_stored_at_the_panel_never_runs_outside_the_envelope(
        gateway: Gateway, config: BenchConfig, script: Principal, olga: Principal,
        pete: Principal, sim: SimBenchThread) -> None:
    """CH2 on at 3 V under a 12 V envelope; the panel stores a list 3 V, 20 V (0.2 s
    each). ``VOLT:MODE LIST,(@2)`` and ``TRIG (@2)``, every approval granted, ran: the
    read-back saw 3 V and said "executed", and 0.2 s later the DUT had 20 V. The list's
    points are now fields bounded by the voltage limit: the live state is outside, so no
    command whose effect cannot be predicted is sent (-222, naming the list), and CH2
    stays at 3 V on the supply's own port."""
    config.policy.watch_seconds = 0  # the primary defence, not the watch's bound
    run = gateway.create_run(script, "script", goal="a voltage list")
    await _on_at_3v(gateway, run.id, olga, pete)
    with own_port(sim.psu_resource_name, panel=True) as panel:
        panel.write("LIST:VOLT 3,20,(@2);:LIST:DWEL 0.2,0.2,(@2)")
        assert panel.query("*OPC?") == "1"
    moded = await _everything(gateway, run.id, "psu", "VOLT:MODE LIST,(@2)", olga, pete)
    assert moded.status == "refused" and moded.code == -224, moded  # review 6's closing
    sim.psu.execute("VOLT:MODE LIST,(@2)", False)  # the panel's key
    for message in ("TRIG (@2)", "*TRG", "VOLT:MODE FIX,(@2)"):
        result = await _everything(gateway, run.id, "psu", message, olga, pete)
        assert result.status == "refused" and result.code == -222, (message, result)
        assert "list voltages" in result.reason and "20" in result.reason, result.reason
    await asyncio.sleep(0.5)
    assert _ch2(sim) == (Decimal(3), "1")


async def test_an_e36312a_list_in_force_is_judged_before_its_trigger_and_after(
        gateway: Gateway, config: BenchConfig, script: Principal, olga: Principal,
        pete: Principal, sim: SimBenchThread) -> None:
    """The list mode approved while the list was inside (3 V, 5 V), then the panel stores
    20 V as its second point: the trigger is refused. A triggered level (``VOLT:TRIG``)
    stored at the panel on a channel that is off is judged when the output would come on
    (-222), and through the gateway it is judged before it is stored."""
    config.policy.watch_seconds = 0
    run = gateway.create_run(script, "script", goal="a voltage list")
    await _on_at_3v(gateway, run.id, olga, pete)
    with own_port(sim.psu_resource_name, panel=True) as panel:
        panel.write("LIST:VOLT 3,5,(@2);:LIST:DWEL 0.2,0.2,(@2)")
        assert panel.query("*OPC?") == "1"
    sim.psu.execute("VOLT:MODE LIST,(@2)", False)  # the panel's key
    with own_port(sim.psu_resource_name, panel=True) as panel:
        panel.write("LIST:VOLT 3,20,(@2)")
        assert panel.query("*OPC?") == "1"
    fired = await _everything(gateway, run.id, "psu", "TRIG (@2)", olga, pete)
    assert fired.status == "refused" and fired.code == -222, fired
    await asyncio.sleep(0.5)
    assert _ch2(sim) == (Decimal(3), "1")
    stored = await _everything(gateway, run.id, "psu", "VOLT:TRIG 20,(@3)", olga, pete)
    assert stored.status == "refused" and stored.code == -222, stored
    with own_port(sim.psu_resource_name, panel=True) as panel:
        panel.write("VOLT:TRIG 20,(@3)")
        assert panel.query("*OPC?") == "1"
    on = await _everything(gateway, run.id, "psu", "VOLT 3,(@3);:OUTP 1,(@3)", olga, pete)
    assert on.status == "refused" and on.code == -222, on
    assert "triggered voltage" in on.reason, on.reason
    with own_port(sim.psu_resource_name, panel=True) as panel:
        assert panel.query("OUTP? (@3)") == "0"


async def test_a_trigger_of_one_channel_is_judged_on_every_channel_it_may_step(
        gateway: Gateway, config: BenchConfig, script: Principal, olga: Principal,
        pete: Principal, sim: SimBenchThread) -> None:
    """The channels' triggers coupled at the panel (``INST:COUP ALL``) and a list 20 V, 3 V
    stored on CH2 (on at 3 V): ``TRIG (@1)`` steps CH2 too. Its snapshot read CH1 only, so
    it ran and CH2 gave the DUT 20 V until the read-back switched it off. A command whose
    effect cannot be predicted is now judged on every channel: refused, CH2 untouched."""
    config.policy.watch_seconds = 0
    run = gateway.create_run(script, "script", goal="a voltage list")
    await _on_at_3v(gateway, run.id, olga, pete)
    with own_port(sim.psu_resource_name, panel=True) as panel:
        panel.write("INST:COUP ALL;:LIST:VOLT 20,3,(@2);:LIST:DWEL 0.2,0.2,(@2)")
    sim.psu.execute("VOLT:MODE LIST,(@2)", False)  # the panel's key
    with own_port(sim.psu_resource_name, panel=True) as panel:
        assert panel.query("*OPC?") == "1"
    fired = await _everything(gateway, run.id, "psu", "TRIG (@1)", olga, pete)
    assert fired.status == "refused" and fired.code == -222, fired
    assert "CH2 list voltages" in fired.reason, fired.reason
    assert _ch2(sim) == (Decimal(3), "1")


async def test_the_watch_switches_off_a_channel_holding_a_list_outside(
        gateway: Gateway, config: BenchConfig, sim: SimBenchThread, script: Principal,
        olga: Principal, pete: Principal) -> None:
    """A list stored outside at the panel on an energized channel is one trigger (a bus
    trigger, a pin) from the DUT: the watch reads the points and makes the channel safe."""
    config.policy.watch_seconds = 0.2
    run = gateway.create_run(script, "script", goal="a voltage list")
    await _on_at_3v(gateway, run.id, olga, pete)
    with own_port(sim.psu_resource_name, panel=True) as panel:
        panel.write("LIST:VOLT 3,20,(@2)")
        assert panel.query("*OPC?") == "1"
    for _ in range(40):
        await asyncio.sleep(0.1)
        if _ch2(sim)[1] == "0":
            break
    assert _ch2(sim)[1] == "0"


_points = st.lists(st.decimals(min_value=-30, max_value=30, places=3), min_size=1, max_size=6)


@given(points=_points, field=st.sampled_from(["list_voltage", "triggered_voltage"]),
       on=st.booleans())
def test_every_stored_point_is_judged_against_the_envelope(
        points: list[Decimal], field: str, on: bool) -> None:
    """For any list the supply answers (NR3, joined by ','), an energized channel is outside
    exactly when one point's magnitude is above the limit; a channel that is off is not."""
    profile = get_profile("e36312a")
    answer = ",".join(f"{p:+.8E}" for p in points)
    state = {"ch2.output": "1" if on else "0", "ch2.voltage": "1", "ch2.current": "0.1",
             "ch2.ovp": "6", "ch2.pairing": "OFF",
             **{f"ch2.{f}": "0" for f, spec in profile.fields.items() if spec.points},
             f"ch2.{field}": normalize(profile, field, answer)}
    limits = {2: ChannelLimits(voltage=Decimal(12), current=Decimal("0.5"))}
    found = breaches(profile, limits, state)
    assert bool(found) == (on and max(abs(p) for p in points) > 12), (answer, found)
    assert all(b.field == field for b in found)


@pytest.mark.parametrize("answer", ["", "3,,20", "3,abc", "3,NaN", "3,9.9E37;4"])
def test_a_garbled_list_answer_is_never_a_value(answer: str) -> None:
    """An answer that is not numbers joined by ',' fails the read: the channel cannot be
    shown inside (a snapshot fails, a read-back makes it safe)."""
    with pytest.raises(InstrumentError):
        normalize(get_profile("e36312a"), "list_voltage", answer)
