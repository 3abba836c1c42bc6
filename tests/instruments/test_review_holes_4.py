"""The fourth hostile review: the shipped profiles against the instruments' own manuals. A
header a profile passes, or holds as something it is not, is tried through the gateway with
every approval a careless operator would give, and the result is read on the simulator's own
port (never the gateway's word for it); the simulator models what the manual says.

1. a stored sequence: the SPD3303X's timer (``TIMEr:SET``, ``TIMEr CH1,ON``) applies levels
   one after another, each for its time, long after the read-back that judged the command
   that started it (docs/reliability.md section 7, "A level applied after the read-back").
2-4. the 2450's remote sense and the DL3021's short circuit and list mode:
   tests/instruments/test_review_holes_4_smu_load.py.
6. the same class as 1 on the DP832: its timer (``:TIMEr:PARAmeter``, ``:TIMEr ON``).
7. the gateway's own link: the SPD3303X's ``DHCP ON`` (every approval) could move the supply
   to another address, and the gateway, with every output's safe action, off it.
8. a safe action that waits: the E36312A's turn-off delay (``OUTP:DEL:FALL``, every approval
   or set at the panel) held the safe action's ``OUTP 0`` back, the DUT outside the envelope.
5. a limit with nothing behind it: an envelope's ``ovp`` on the DP832, whose profile reads no
   OVP level, was silently ignored (an OVP of 30 V under ``ovp = 6``), and so was a channel
   the profile does not have.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench_gate.config import BenchConfig, ChannelLimits, InstrumentConfig, PolicyConfig
from bench_gate.envelope import unbounded
from bench_gate.errors import InvalidInput
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.policy import Verdict, decide
from bench_gate.scpi import ScpiError, classify, get_profile
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import own_port, served_bench
from tests.core.test_review_holes_2 import _everything

SPD_LIMITS = {1: ChannelLimits(voltage=Decimal(12), current=Decimal(1)),
              2: ChannelLimits(voltage=Decimal(6), current=Decimal("0.5"))}


@pytest.fixture
def supply_sim() -> Iterator[SimServedThread]:
    with SimServedThread("spd3303x") as served:
        yield served


@pytest.fixture
def dp832_sim() -> Iterator[SimServedThread]:
    with SimServedThread("dp832") as served:
        yield served


@pytest.fixture
def config(sim: SimBenchThread, supply_sim: SimServedThread,
           dp832_sim: SimServedThread) -> BenchConfig:
    cfg = served_bench(sim, "spd", supply_sim, "spd3303x", SPD_LIMITS)
    cfg.instruments.append(InstrumentConfig(name="dp832", resource=dp832_sim.resource_name,
                                            profile="dp832", socket_port=0))
    cfg.envelope["dp832"] = dict(SPD_LIMITS)
    return cfg


def _spd_ch1(supply_sim: SimServedThread) -> tuple[Decimal, bool]:
    """What CH1's DUT sees on the SPD3303X's own port: volts at the terminals, output on."""
    with own_port(supply_sim.resource_name) as res:
        word = int(res.query("SYST:STAT?"), 16)
        return Decimal(res.query("MEAS:VOLT? CH1")), bool(word >> 4 & 1)


# ------------------------------------------------------------------ 1. a stored sequence
async def test_an_spd3303x_timer_never_applies_a_level_outside_the_envelope(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        supply_sim: SimServedThread) -> None:
    """CH1 on at 3 V under a 12 V envelope. ``TIMEr:SET CH1,2,20,0.5,100`` (a header the
    incomplete profile did not know: held, every approval) stored 20 V; ``TIMEr CH1,ON``
    (every approval) applied group 1 (3 V, 0.3 s), the read-back saw 3 V and said
    "executed", and 0.3 s later the supply put 20 V on the DUT. A group's levels are now
    judged before they are stored (-222), and starting the timer is refused: it applies
    stored levels after any read-back, including groups set at the front panel."""
    run = gateway.create_run(script, "script", goal="a power-on sequence")
    done = await _everything(gateway, run.id, "spd",
                             "CH1:CURR 0.5;:CH1:VOLT 3;:OUTP CH1,ON", olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    first = await _everything(gateway, run.id, "spd", "TIMEr:SET CH1,1,3,0.5,0.3", olga, pete)
    assert getattr(first, "request", None) is not None, first  # inside: held for a person
    second = await _everything(gateway, run.id, "spd", "TIMEr:SET CH1,2,20,0.5,100",
                               olga, pete)
    assert second.status == "refused" and second.code == -222, second
    assert "12" in second.reason, second.reason
    started = await _everything(gateway, run.id, "spd", "TIMEr CH1,ON", olga, pete)
    assert started.status == "refused" and started.code == -224, started
    assert "after the read-back" in started.reason, started.reason
    await asyncio.sleep(0.6)
    volts, on = _spd_ch1(supply_sim)
    assert on and volts == Decimal(3), (volts, on)
    with own_port(supply_sim.resource_name) as res:
        assert res.query("TIME:SET? CH1,2").startswith("0.000"), "20 V was never stored"


async def test_an_spd3303x_timer_set_at_the_panel_is_never_started(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        supply_sim: SimServedThread) -> None:
    """Timer groups stored at the front panel (30 V in group 2): ``TIMEr CH1,ON`` would run
    them with no parameter the gateway could judge. Refused, whatever the approvals; the
    timer's stop (``TIMEr CH1,OFF``) is still taken, held for every approval."""
    run = gateway.create_run(script, "script", goal="a power-on sequence")
    done = await _everything(gateway, run.id, "spd",
                             "CH1:CURR 0.5;:CH1:VOLT 3;:OUTP CH1,ON", olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    with own_port(supply_sim.resource_name, panel=True) as panel:
        panel.write("TIME:SET CH1,1,3,0.5,0.2")
        panel.write("TIME:SET CH1,2,30,0.5,100")
    for spelling in ("TIMEr CH1,ON", "TIME CH1,1", "timer ch1,on"):
        started = await _everything(gateway, run.id, "spd", spelling, olga, pete)
        assert started.status == "refused" and started.code == -224, (spelling, started)
    stop = await gateway.submit(run.id, "spd", "TIMEr CH1,OFF")
    assert stop.status == "pending" and len(stop.request.required) == 3, stop
    # SCPI-99 §7.3: 0 is OFF where OFF is a choice, and 1 is ON, refused with the reason.
    assert classify("TIME CH2,0", "spd3303x").canonical == ("TIME CH2,OFF",)
    with pytest.raises(ScpiError, match=r"-224.*after the read-back"):
        classify("TIME CH2,1", "spd3303x")
    await asyncio.sleep(0.4)
    assert _spd_ch1(supply_sim) == (Decimal(3), True)


# ------------------------------------------------------------------ 5. a limit that bounds nothing
@pytest.mark.parametrize(("profile", "limits", "named"), [
    ("dp832", {1: ChannelLimits(voltage=Decimal(5), ovp=Decimal(6))}, "channel 1 ovp"),
    ("spd3303x", {1: ChannelLimits(ovp=Decimal(6))}, "channel 1 ovp"),
    ("k2450", {1: ChannelLimits(voltage=Decimal(5), ovp=Decimal(6))}, "channel 1 ovp"),
    ("e36312a", {4: ChannelLimits(voltage=Decimal(5))}, "no channel 4"),
    ("34465a", {1: ChannelLimits(voltage=Decimal(5))}, "no channel 1"),
])
def test_an_envelope_limit_that_bounds_nothing_is_refused_at_start(
        sim: SimBenchThread, tmp_path: Path, clock: Any, profile: str,
        limits: dict[int, ChannelLimits], named: str) -> None:
    """``ovp = 6`` on the DP832's CH1: no field of its profile is bounded by ovp, so the
    gateway never read the OVP level, and ``:OUTP:OVP:VAL CH1,30`` then ``:OUTP CH1,ON`` ran
    (every approval) with the supply's OVP at 30 V under a limit that looked enforced. A
    channel the profile lacks was skipped the same way. Either is refused at start, naming
    the limit, never silently ignored."""
    cfg = served_bench(sim, "x", SimpleNamespace(resource_name="TCPIP0::127.0.0.1::9::SOCKET"),
                       profile, limits)
    store = SqliteStore(tmp_path / "gate.db")
    try:
        with pytest.raises(InvalidInput, match=named) as caught:
            Gateway(cfg, store, clock=clock)
        assert caught.value.message.startswith("envelope.x: "), caught.value.message
    finally:
        store.close()


def test_every_shipped_envelope_key_bounds_a_field_where_it_is_read() -> None:
    """The keys each shipped profile does bound (so a bench may use them), for the record:
    the OVP level only on the E36312A."""
    every = ChannelLimits(voltage=Decimal(1), current=Decimal(1), ovp=Decimal(1))
    idle = {name: [p.split(": ", 1)[0] for p in unbounded(get_profile(name), {1: every})]
            for name in ("e36312a", "e3631a", "dp832", "spd3303x", "dl3021", "k2450")}
    assert idle == {"e36312a": [], "e3631a": ["channel 1 ovp"], "dp832": ["channel 1 ovp"],
                    "spd3303x": ["channel 1 ovp"], "dl3021": ["channel 1 ovp"],
                    "k2450": ["channel 1 ovp"]}


# ------------------------------------------------------------------ 6. the DP832's timer
def _dp832_ch1(dp832_sim: SimServedThread) -> tuple[float, float]:
    inst: Any = dp832_sim.instrument  # the DP832's model: its terminals, as the DUT sees them
    return tuple(inst.terminals(1))


async def test_a_dp832_timer_never_applies_a_level_outside_the_envelope(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        dp832_sim: SimServedThread) -> None:
    """CH1 on at 3 V (100 Ohm) under a 12 V envelope. ``:TIME:PARA 2,20,0.5,100`` on the
    selected CH1 (unknown: held, every approval, never judged) and ``:TIME ON`` (every
    approval): group 1 (3 V, 1 s) was read back as "executed", then the supply put 20 V on
    the DUT. A group's levels are judged before they are stored (-222), and the timer and the
    delayer are never started (-224)."""
    run = gateway.create_run(script, "script", goal="a power-on sequence")
    done = await _everything(gateway, run.id, "dp832",
                             ":SOUR1:CURR 0.5;:SOUR1:VOLT 3;:OUTP CH1,ON", olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    await _everything(gateway, run.id, "dp832", ":INST:NSEL 1;:TIME:PARA 1,3,0.5,1",
                      olga, pete)
    high = await _everything(gateway, run.id, "dp832", ":TIME:PARA 2,20,0.5,100", olga, pete)
    assert getattr(high, "status", None) == "refused" and high.code == -222, high
    for start in (":TIME ON", ":TIMEr:STATe 1", ":DELAY ON", ":DELAY:STAT 1"):
        started = await _everything(gateway, run.id, "dp832", start, olga, pete)
        assert getattr(started, "status", None) == "refused" and started.code == -224, \
            (start, started)
        assert "after the read-back" in started.reason, started.reason
    for start in (":TIME ON,CH1", ":TIME CH1,ON", ":DELAY CH2,ON"):  # a channel: -108
        started = await _everything(gateway, run.id, "dp832", start, olga, pete)
        assert getattr(started, "status", None) == "refused", (start, started)
    dp832_sim.instrument.execute("TIME:PARA 2,20,0.5,100,(@1)", False)  # the panel's groups
    await asyncio.sleep(1.3)
    assert _dp832_ch1(dp832_sim) == pytest.approx((3.0, 0.03))
    stop = await gateway.submit(run.id, "dp832", ":TIME OFF")
    assert stop.status == "pending" and len(stop.request.required) == 3, stop


def test_the_simulated_dp832_runs_its_timer(dp832_sim: SimServedThread) -> None:
    """The model the test above relies on: each group for its time, on the selected channel."""
    inst: Any = dp832_sim.instrument
    for message in (":SOUR1:CURR 0.5", ":SOUR1:VOLT 3", ":OUTP CH1,ON", ":INST:NSEL 1"):
        inst.handle_message(message)
    inst.execute("TIME:PARA 1,4,0.5,0.2", False)
    inst.execute("TIME:PARA 2,6,0.5,100", False)
    inst.execute("TIME ON", False)
    assert inst.terminals(1) == pytest.approx((4.0, 0.04))
    time.sleep(0.4)
    assert inst.terminals(1) == pytest.approx((6.0, 0.06))
    inst.execute("TIME OFF", False)


# ------------------------------------------------------------------ 7. the gateway's own link
@pytest.mark.parametrize("message", ["DHCP ON", "DHCP 0", "dhcp off", 'IPaddr "10.0.0.5"',
                                     'ip "10.0.0.5"', 'MASKaddr "255.255.0.0"',
                                     'GATEaddr "10.0.0.1"'])
async def test_the_spd3303x_network_set_up_is_never_changed_through_the_gateway(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        supply_sim: SimServedThread, message: str) -> None:
    """``DHCP ON`` was a state change (every approval): the supply would take a new address
    from the network, and the gateway would lose it, and with it the safe action of every
    output. The network set-up is forbidden through the gateway, as on the E36312A; a static
    address, its mask and its gateway were held (one could be approved) and are too."""
    run = gateway.create_run(script, "script", goal="tidy the network")
    result = await _everything(gateway, run.id, "spd", message, olga, pete)
    assert getattr(result, "status", None) == "refused" and result.code == -203, result
    with own_port(supply_sim.resource_name) as res:
        assert res.query("DHCP?") == "0"
    asked = await gateway.submit(run.id, "spd", "DHCP?")
    assert asked.status == "executed" and asked.response == "0", asked


# ------------------------------------------------------------------ properties, for all inputs
_levels = st.decimals(min_value=0, max_value=32, places=3)


@settings(max_examples=200, deadline=None)
@given(channel=st.sampled_from([1, 2]), volts=_levels, amps=st.decimals(
    min_value=0, max_value="3.2", places=3), group=st.integers(1, 5),
    spelling=st.sampled_from(["TIMEr:SET", "TIME:SET", "timer:set", "Time:Set"]))
def test_a_stored_timer_level_is_held_inside_the_envelope_and_refused_outside(
        channel: int, volts: Decimal, amps: Decimal, group: int, spelling: str) -> None:
    """Any group the SPD3303X's timer would store: never passed; refused (-222) when its
    voltage or current is above the channel's limit, else held for every approval."""
    c = classify(f"{spelling} CH{channel},{group},{volts},{amps},5", "spd3303x")
    decision = decide(c, SPD_LIMITS, PolicyConfig())
    limits = SPD_LIMITS[channel]
    assert limits.voltage is not None and limits.current is not None
    outside = volts > limits.voltage or amps > limits.current
    assert decision.verdict is (Verdict.REFUSE if outside else Verdict.HOLD), decision
    assert outside or len(decision.required) == 3


_START = {
    "spd3303x": ["TIMEr CH1,{on}", "TIME CH2,{on}"],
    "dp832": ["TIMEr {on}", "TIME:STAT {on}", "DELAY {on}", "DELAY:STATe {on}"],
    "dl3021": ["INP:SHOR {on}", "SOUR:INPut:SHORt:STAT {on}"],
}


@settings(max_examples=200, deadline=None)
@given(case=st.sampled_from([(p, f) for p, forms in _START.items() for f in forms]),
       on=st.sampled_from(["ON", "on", "On", "1", "1.0", "+1", "2", "0.6"]),
       lower=st.booleans())
def test_a_sequence_or_a_short_is_never_started_whatever_the_spelling(
        case: tuple[str, str], on: str, lower: bool) -> None:
    """Starting a timer, a delayer or a short circuit, in any case and any spelling of ON
    (SCPI-99 7.3: a number that rounds to 1 or more is ON): refused with -224, never held."""
    profile, form = case
    message = form.format(on=on)
    with pytest.raises(ScpiError, match="-224"):
        classify(message.lower() if lower else message, profile)


# ------------------------------------------------------------------ 8. a safe action that waits
@pytest.mark.parametrize("where", ["gateway", "panel"])
async def test_a_turn_off_delay_never_holds_back_the_safe_action(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: SimBenchThread, where: str) -> None:
    """CH2 on at 3 V under 12 V with a 3 s turn-off delay (``OUTP:DEL:FALL 3,(@2)``, every
    approval, or set at the panel): the panel then set CH2 to 15 V, the next write's read-back
    found it and sent the safe action ``OUTP 0,(@2)``, and the supply kept CH2 on for 3 s more
    (Keysight's OUTPut:DELay:FALL delays every on-to-off transition of OUTPut:STATe). The
    E36312A's safe action clears the channel's turn-off delay first: it never waits."""
    run = gateway.create_run(script, "script", goal="a turn-off sequence")
    if where == "gateway":
        delay = await _everything(gateway, run.id, "psu", "OUTP:DEL:FALL 3,(@2)", olga, pete)
        assert delay.request.status.value == "executed", delay.request.outcome
    else:
        with own_port(sim.psu_resource_name, panel=True) as panel:
            panel.write("OUTP:DEL:FALL 3,(@2)")
    done = await _everything(gateway, run.id, "psu", "CURR 0.1,(@2);:VOLT 3,(@2);:OUTP ON,(@2)",
                             olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    with own_port(sim.psu_resource_name, panel=True) as panel:
        panel.write("VOLT 15,(@2)")  # at the front panel, behind the gateway's back
    await _everything(gateway, run.id, "psu", "VOLT 1,(@1)", olga, pete)
    await asyncio.sleep(0.3)
    with own_port(sim.psu_resource_name, panel=True) as panel:
        assert panel.query("OUTP? (@2)") == "0", "CH2 still on outside the envelope"
        assert Decimal(panel.query("MEAS:VOLT? (@2)")) == 0
