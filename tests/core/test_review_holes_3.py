"""The third hostile review: the decision side and the doors, each attack proven on the
simulator's own port (never the gateway's word for it) and each closed as a class
(docs/reliability.md section 7).

1. coupled outputs: a pairing (the SPD3303X's ``OUTP:TRACK 1|2``, the E36312A's
   ``OUTP:PAIR SER|PAR``) makes one channel follow another and joins their terminals, so
   the DUT sees a sum no channel's envelope bounds. Entering one is refused; one already
   set at the front panel is judged conservatively (the follower takes the leader's
   setpoints in the predicted state).
2. tracking on another profile: the DP832's ``OUTP:TRAC CH1,ON`` makes CH1 and CH2 follow
   each other's setpoints, which the prediction did not know (only the E36312A's was
   modelled); a coupling may copy both ways.
4. approve-with-edits, for any edit text: an edit never leaves the envelope, never moves
   another channel or another field, and every bad value is a clear error.
3. one person, two token names: a format character (a zero-width space) between a letter
   and its combining accent survived as a second spelling of the same name.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench_gate.auth import normalize_name
from bench_gate.config import BenchConfig, ChannelLimits, InstrumentConfig
from bench_gate.errors import GatewayError
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
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
def e3631a_sim() -> Iterator[SimServedThread]:
    with SimServedThread("e3631a") as served:
        yield served


@pytest.fixture
def config(sim: SimBenchThread, supply_sim: SimServedThread, dp832_sim: SimServedThread,
           e3631a_sim: SimServedThread) -> BenchConfig:
    cfg = served_bench(sim, "spd", supply_sim, "spd3303x", SPD_LIMITS)
    for name, served in (("dp832", dp832_sim), ("e3631a", e3631a_sim)):
        cfg.instruments.append(InstrumentConfig(name=name, resource=served.resource_name,
                                                profile=name, socket_port=0))
    cfg.envelope["dp832"] = dict(SPD_LIMITS)
    cfg.envelope["e3631a"] = {1: ChannelLimits(voltage=Decimal(6), current=Decimal(1)),
                              2: ChannelLimits(voltage=Decimal(12), current=Decimal("0.5")),
                              3: ChannelLimits(voltage=Decimal(5), current=Decimal("0.5"))}
    return cfg


def _spd_state(supply_sim: SimServedThread) -> tuple[Decimal, bool]:
    """CH2's voltage setpoint and output on the SPD3303X's own port."""
    with own_port(supply_sim.resource_name) as res:
        word = int(res.query("SYST:STAT?"), 16)
        return Decimal(res.query("CH2:VOLT?")), bool(word >> 5 & 1)


# ------------------------------------------------------------------ 1. coupled outputs
@pytest.mark.parametrize("mode", ["1", "2"])
async def test_the_gateway_never_enters_series_or_parallel_tracking(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        supply_sim: SimServedThread, mode: str) -> None:
    """``OUTP:TRACK 1`` (series) with every approval granted, CH2 on at 3 V under its 6 V
    envelope: CH2 then followed CH1, and ``CH1:VOLT 10`` (inside CH1's 12 V, one setpoint
    approval) put CH2 at 10 V, and 20 V across the joined terminals. The envelope is per
    channel and cannot bound the sum, so entering a pairing is refused, never held."""
    run = gateway.create_run(script, "script", goal="a split supply")
    done = await _everything(gateway, run.id, "spd",
                             "CH2:CURR 0.2;:CH2:VOLT 3;:OUTP CH2,ON", olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    result = await gateway.submit(run.id, "spd", f"OUTP:TRACK {mode}")
    assert result.status == "refused", result
    assert result.code == -222 and f"mode {mode} is outside" in result.reason, result
    assert "the bench envelope bounds each channel, not their sum" in result.reason  # why
    with own_port(supply_sim.resource_name) as res:
        assert int(res.query("SYST:STAT?"), 16) >> 2 & 0b11 == 0b01, "still independent"
    await _everything(gateway, run.id, "spd", "CH1:VOLT 10", olga, pete)
    assert _spd_state(supply_sim) == (Decimal(3), True)


async def test_a_pairing_set_at_the_panel_is_judged_on_the_follower(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        supply_sim: SimServedThread) -> None:
    """Series tracking set at the SPD3303X's front panel, CH2 on at 3 V: ``CH1:VOLT 10``
    would move CH2 to 10 V against its 6 V envelope. The prediction copies CH1's setpoint
    into CH2 while the status word says paired, so it is refused (-222) naming CH2."""
    run = gateway.create_run(script, "script", goal="a split supply")
    done = await _everything(gateway, run.id, "spd",
                             "CH2:CURR 0.2;:CH2:VOLT 3;:OUTP CH2,ON", olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    # The front panel's key (the simulator parses with the gateway's profile, which now
    # refuses it, so the unit goes to its model directly).
    supply_sim.instrument.execute("OUTP:TRACK 1", False)
    with own_port(supply_sim.resource_name) as res:
        assert int(res.query("SYST:STAT?"), 16) >> 2 & 0b11 == 0b11, "series"
    result = await gateway.submit(run.id, "spd", "CH1:VOLT 10")
    assert result.status == "refused" and result.code == -222, result
    assert "CH2" in result.reason, result.reason
    assert _spd_state(supply_sim) == (Decimal(3), True)
    with own_port(supply_sim.resource_name) as res:
        assert Decimal(res.query("CH1:VOLT?")) == 0


async def test_the_e36312a_never_enters_a_pairing(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: Any) -> None:
    """``OUTP:PAIR SER`` joins the E36312A's CH2 and CH3 (E36300 guide, OUTPut:PAIR): the
    DUT sees their sum. Refused, never held; ``OUTP:PAIR OFF`` still needs every approval."""
    run = gateway.create_run(script, "script", goal="a higher voltage")
    for mode in ("SER", "PAR"):
        result = await gateway.submit(run.id, "psu", f"OUTP:PAIR {mode}")
        assert result.status == "refused" and result.code == -224, result
        assert "must be one of OFF" in result.reason, result.reason
        assert "the bench envelope bounds each channel, not their sum" in result.reason
    with own_port(sim.psu_resource_name, panel=True) as panel:
        assert panel.query("OUTP:PAIR?").strip() == "OFF"
    off = await gateway.submit(run.id, "psu", "OUTP:PAIR OFF")
    assert off.status == "pending" and len(off.request.required) == 3, off


async def test_an_e36312a_pairing_set_at_the_panel_is_judged_on_ch3(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: Any) -> None:
    """``OUTP:PAIR SER`` set at the panel with CH3 on at 3 V under a 5 V envelope: a CH2
    setpoint of 10 V is judged on CH3 too, and refused (-222) naming CH3."""
    gateway.config.envelope["psu"][3] = ChannelLimits(voltage=Decimal(5),
                                                      current=Decimal("0.5"))
    run = gateway.create_run(script, "script", goal="a higher voltage")
    done = await _everything(gateway, run.id, "psu",
                             "CURR 0.2,(@3);:VOLT 3,(@3);:OUTP ON,(@3)", olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    sim.bench.psu.execute("OUTP:PAIR SER", False)  # the front panel's key, as above
    result = await gateway.submit(run.id, "psu", "VOLT 10,(@2)")
    assert result.status == "refused" and result.code == -222, result
    assert "CH3" in result.reason, result.reason
    with own_port(sim.psu_resource_name, panel=True) as panel:
        assert Decimal(panel.query("VOLT? (@2)")) != 10


# ------------------------------------------------------------------ 2. tracking both ways
@pytest.mark.parametrize(("track", "message"), [("CH1", "SOUR1:VOLT 10"),
                                                ("CH2", "SOUR1:VOLT 10")])
async def test_a_dp832_setpoint_never_moves_a_tracking_channel_outside_its_envelope(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        dp832_sim: SimServedThread, track: str, message: str) -> None:
    """Tracking set at the DP832's panel, CH2 on at 3 V under its 6 V envelope: a CH1
    setpoint of 10 V (inside CH1's 12 V, one setpoint approval) moves CH2 to 10 V too
    (DP800 guide, :OUTPut:TRACk). Judged on CH2 as well, so refused (-222) naming CH2; a
    CH2 setpoint inside moves CH1 with it and is judged so."""
    run = gateway.create_run(script, "script", goal="a symmetric bias")
    done = await _everything(gateway, run.id, "dp832",
                             "SOUR2:CURR 0.2;:SOUR2:VOLT 3;:OUTP CH2,ON", olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    with own_port(dp832_sim.resource_name) as res:
        res.write(f"OUTP:TRAC {track},ON")
        assert res.query(f"OUTP:TRAC? {track}").strip() == "ON"
    result = await gateway.submit(run.id, "dp832", message)
    assert result.status == "refused" and result.code == -222, result
    assert "CH2" in result.reason, result.reason
    held = await gateway.submit(run.id, "dp832", "SOUR2:VOLT 5")
    assert held.status == "pending", held
    proposed = held.request.handoff["proposed"]
    assert proposed["ch2.voltage"] == "5.0" and proposed["ch1.voltage"] == "5.0", proposed
    with own_port(dp832_sim.resource_name) as res:
        assert Decimal(res.query("SOUR2:VOLT?")) == 3
        assert Decimal(res.query("SOUR1:VOLT?")) == 0
    await gateway.grant(held.request.id, olga, ["setpoint"],
                        proposal_hash=held.request.proposal_hash)
    done = gateway.get_request(held.request.id)
    assert done.status.value == "executed", done.outcome
    with own_port(dp832_sim.resource_name) as res:  # the simulator tracks
        assert Decimal(res.query("SOUR2:VOLT?")) == Decimal(res.query("SOUR1:VOLT?")) == 5



@pytest.mark.parametrize("message", ["APPL P25V,10,0.1", "INST P25V;:VOLT 10"])
async def test_an_e3631a_setpoint_never_moves_the_tracking_negative_output_outside(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        e3631a_sim: SimServedThread, message: str) -> None:
    """Track mode set at the E3631A's panel (OUTPut:TRACk: the -25V output follows the +25V
    output's voltage, with the opposite sign), outputs on, N25V at -3 V under its 5 V
    envelope: +10 V on P25V (inside its 12 V) would put N25V at -10 V. Judged on N25V
    (CH3) by magnitude, so refused (-222) naming CH3; one inside reads back as predicted."""
    with own_port(e3631a_sim.resource_name) as res:
        for command in ("APPL N25V,-3,0.2", "APPL P25V,3,0.2", "OUTP:TRAC ON", "OUTP ON"):
            res.write(command)
        assert res.query("OUTP:TRAC?").strip() in ("1", "ON")
    run = gateway.create_run(script, "script", goal="a symmetric bias")
    result = await gateway.submit(run.id, "e3631a", message)
    assert result.status == "refused" and result.code == -222, result
    assert "CH3" in result.reason, result.reason
    inside = await _everything(gateway, run.id, "e3631a", "APPL P25V,4,0.1", olga, pete)
    assert inside.request.status.value == "executed", inside.request.outcome
    with own_port(e3631a_sim.resource_name) as res:  # the simulator tracks
        assert Decimal(res.query("INST N25V;:VOLT?")) == -4


# ------------------------------------------------------------------ 3. one person, two names
@pytest.mark.parametrize(("one", "other"), [
    ("\u00f3lga", "o\u200b\u0301lga"),  # ó, and o + zero-width space + combining acute
    ("olga", "\uff2f\uff4c\uff47\uff41"),  # fullwidth
    ("kate", "\u212aate"),  # Kelvin sign
    ("ross", "ro\u017f\u017f"),  # long s
    ("olga", " OLGA\u200e "),  # case, spaces, a direction mark
])
def test_spellings_of_one_name_are_one_person(one: str, other: str) -> None:
    """``ólga`` held a token; ``o<ZWSP><U+0301>lga`` normalized to an uncomposed
    ``o<U+0301>lga``, passed the uniqueness check and got a second token. Format
    characters are removed before the Unicode normalization, so both are one name."""
    assert normalize_name(one) == normalize_name(other)


@given(st.text(max_size=12))
def test_normalizing_a_name_twice_changes_nothing(raw: str) -> None:
    """Names are stored normalized and compared normalized again: one pass is final."""
    once = normalize_name(raw)
    assert normalize_name(once) == once
    assert normalize_name("\u200b".join(raw)) == normalize_name(raw.replace("\u200b", ""))


# ------------------------------------------------------------------ 4. edits, any text
_EDIT_TEXT = st.one_of(
    st.sampled_from(["1", "5.5", "MAX", "MIN", "DEF", "NaN", "INF", "-INF", "1e309", "-0",
                     "1,(@1)", "(@3),1", "1;:OUTP ON,(@2)", "1\n", "#H10", "1 V", "1mV",
                     "2.5E0,(@1:3)", "\"1\"", "#15hello", "", " ", "1,CH1"]),
    st.text(alphabet=st.sampled_from(list("0123456789.,;:-+eE@()# VvMAXINF\"'\n")),
            max_size=14))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=_EDIT_TEXT)
async def test_an_edit_never_leaves_the_envelope_or_its_field(
        gateway: Gateway, script: Principal, olga: Principal, sim: Any, raw: str) -> None:
    """``VOLT 2,(@2)`` held on the E36312A (CH2 under 6 V here): olga approves it with the
    edit ``CH2.voltage=<any text>``. Either a clear error (nothing recorded, the proposal
    as it was), or the same one action on CH2's voltage with a value inside the envelope."""
    gateway.config.envelope["psu"][2] = ChannelLimits(voltage=Decimal(6),
                                                      current=Decimal("0.5"))
    run = gateway.create_run(script, "script", goal="an edit")
    held = await gateway.submit(run.id, "psu", "VOLT 2,(@2)")
    req = held.request
    assert req is not None
    try:
        done = await gateway.grant(req.id, olga, ["setpoint"], edits={"CH2.voltage": raw},
                                   proposal_hash=req.proposal_hash)
    except GatewayError as exc:
        assert str(exc), "a reason"
        after = gateway.get_request(req.id)
        assert after.proposal_hash == req.proposal_hash and not after.approvals
        await gateway.cancel(req.id, script)
        return
    (action,) = done.request.actions
    assert (action.channel, action.field, action.effect) == (2, "voltage", "setpoint")
    assert action.canonical.startswith("VOLT ") and action.canonical.endswith(",(@2)")
    assert abs(Decimal(action.new or "nan")) <= 6, action
    with own_port(sim.psu_resource_name, panel=True) as panel:
        assert Decimal(panel.query("VOLT? (@2)")) == Decimal(action.new or "nan")
        assert Decimal(panel.query("VOLT? (@1)")) == 0
