"""The Rigol DP832 (profile dp832), a supply that names its channels as a parameter word
(``OUTP CH1,ON``, ``MEAS:VOLT? CH2``) or by a ``:SOURce<n>`` suffix, and answers booleans
ON/OFF (its profile and simulator: test_extra_instruments.py). Left out, the channel
means the instrument's selection: the gateway keeps each connection's selection itself and
always writes the channel out, so nothing it sends depends on the panel's selection (proven
on the simulator's own port, which keeps its own selection and refuses channel lists).
Through the socket door, with real pyvisa clients over TCP: reads pass; a setpoint is held
and, once approved, reaches its channel alone; ``OUTP ON`` needs the setpoint and output
enable approvals and is read back from ``ON``; the envelope applies per channel; tracking
needs every approval; the emergency stop switches every output off.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench_gate.config import BenchConfig, ChannelLimits
from bench_gate.errors import InstrumentError
from bench_gate.gateway import Gateway
from bench_gate.models import ApprovalKind, Principal, Status
from bench_gate.scpi import Effect, classify, command_examples, get_profile, lex, query_examples
from bench_gate.snapshots import normalize
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import own_port, served_bench
from tests.doors.proxy.test_proxy import in_thread, next_pending

PROFILE = "dp832"
NO_ERROR = '0,"No error"'
LIMITS = {1: ChannelLimits(voltage=Decimal(12), current=Decimal(1)),
          2: ChannelLimits(voltage=Decimal(6), current=Decimal("0.5")),
          3: ChannelLimits(voltage=Decimal("3.3"), current=Decimal("0.5"))}


@pytest.fixture
def supply_sim() -> Iterator[SimServedThread]:
    with SimServedThread("dp832") as served:
        yield served


@pytest.fixture
def config(sim: SimBenchThread, supply_sim: SimServedThread) -> BenchConfig:
    return served_bench(sim, "dp832", supply_sim, PROFILE, LIMITS)


@pytest.fixture
def supply(open_client: Callable[..., Any]) -> Any:
    """A script's connection to the DP832's socket door."""
    return open_client("dp832")


@pytest.fixture
def panel(supply_sim: SimServedThread) -> Iterator[Any]:
    """The simulator's own port: the supply's real state, not what the gateway says."""
    with own_port(supply_sim.resource_name) as res:
        yield res


def levels(panel: Any) -> dict[int, tuple[Decimal, Decimal, str]]:
    """Each channel's (voltage, current, output), read on the simulator's own port."""
    return {ch: (Decimal(panel.query(f"SOUR{ch}:VOLT?")), Decimal(panel.query(f"SOUR{ch}:CURR?")),
                 panel.query(f"OUTP? CH{ch}")) for ch in (1, 2, 3)}


async def grant(gateway: Gateway, olga: Principal, req: Any, task: Any) -> None:
    result = await gateway.grant(req.id, olga, list(req.required),
                                 proposal_hash=req.proposal_hash)
    assert result.request.status is Status.EXECUTED, result.request.outcome
    await task


# ------------------------------------------------------------------ rendering

def test_channel_words_and_booleans_in_the_dp832s_spelling() -> None:
    assert classify("OUTP CH2,1", PROFILE).canonical == ("OUTP CH2,ON",)
    assert classify("OUTP OFF", PROFILE, selected=3).canonical == ("OUTP CH3,OFF",)
    assert classify("APPL CH3,3,0.5", PROFILE).canonical == (  # :APPLy selects, too
        "INST:NSEL 3", "SOUR3:VOLT 3.0", "SOUR3:CURR 0.5")
    assert classify("VOLT 5", PROFILE, selected=2).canonical == ("SOUR2:VOLT 5.0",)
    assert classify("MEAS:CURR?", PROFILE, selected=2).canonical == ("MEAS:CURR? CH2",)
    # The E3631A's booleans and channel lists are untouched.
    assert classify("OUTP ON", "e3631a").canonical == ("OUTP 1",) * 3


def test_an_on_off_answer_is_read_as_a_boolean_and_anything_else_fails_closed() -> None:
    profile = get_profile(PROFILE)
    assert normalize(profile, "output", "ON\n") == "1"
    assert normalize(profile, "output", "OFF") == "0"
    assert normalize(profile, "output", "1") == "1"
    with pytest.raises(InstrumentError):
        normalize(profile, "output", "MAYBE")


_PROFILE = get_profile(PROFILE)
EXAMPLES = [e.message for e in command_examples(_PROFILE, frozenset(Effect) - {Effect.FORBIDDEN})
            + query_examples(_PROFILE, frozenset(Effect) - {Effect.FORBIDDEN})]


@settings(max_examples=200, deadline=None)
@given(message=st.sampled_from(EXAMPLES), selected=st.sampled_from([None, 1, 2, 3]))
def test_every_unit_names_its_channel_on_the_wire(message: str, selected: int | None) -> None:
    """For every command and query the profile knows, under any selection: a unit with a
    channel goes out naming it (CHn, SOURn, or the select command first), one unit each,
    never with a channel list the DP832 does not take."""
    for unit in classify(message, PROFILE, selected=selected).units:
        texts = _PROFILE.wire(unit.canonical)
        assert texts is not None, unit.canonical
        assert all("(@" not in t and len(lex(t)) == 1 for t in texts), texts
        if unit.channel is None or unit.effect is Effect.SELECT:
            continue
        ch = unit.channel
        assert (texts == (f"INST:NSEL {ch}", texts[-1]) or f"CH{ch}" in texts[0]
                or texts[0].startswith(f"SOUR{ch}:")), (message, texts)


# ------------------------------------------------------------------ through the socket door

READS = ["*IDN?", "INST?", "INST:NSEL?", "VOLT?", "CURR?", "SOUR3:VOLT?", "MEAS?",
         "MEAS:CURR? CH1", "MEAS:ALL?", "APPL?", "APPL? CH3", "OUTP?", "OUTP? CH1",
         "OUTP:MODE?", "OUTP:OVP? CH2", "OUTP:OVP:VAL?", "VOLT:PROT?", "SYST:VERS?",
         "STAT:QUES?", "*STB?"]


async def test_reads_pass_at_once_on_the_connections_selection(
        supply: Any, gateway: Gateway, panel: Any) -> None:
    panel.write("SOUR2:VOLT 7.5")

    def script() -> tuple[dict[str, str], str]:
        supply.write("INST CH2")
        answers = {q: supply.query(q) for q in READS}
        return answers, supply.query("SYST:ERR?")

    panel.write("INST:NSEL 3")  # the instrument's selection is never trusted
    answers, error = await in_thread(script)
    assert all(answers.values()), answers
    assert error == NO_ERROR
    assert answers["INST?"] == "CH2" and answers["INST:NSEL?"] == "2"
    assert Decimal(answers["VOLT?"]) == Decimal("7.5") and answers["OUTP?"] == "OFF"
    assert answers["APPL?"].startswith("CH2:30V/3A,7.500")
    assert not gateway.list_requests(), "a read was held"
    assert panel.query("SYST:ERR?") == NO_ERROR, "a channel list reached the wire"


async def test_a_setpoint_is_held_and_reaches_its_channel_alone(
        supply: Any, gateway: Gateway, olga: Principal, panel: Any) -> None:
    panel.write("INST:NSEL 3")  # the instrument's own selection: CH3
    before = levels(panel)
    task = asyncio.ensure_future(in_thread(supply.write, "INST CH2;:VOLT 5"))
    req = await next_pending(gateway)
    assert [(a.effect, a.channel, a.canonical) for a in req.actions] == [
        ("select", 2, "INST:NSEL 2"), ("setpoint", 2, "SOUR2:VOLT 5.0")]
    assert set(req.required) == {ApprovalKind.SETPOINT}
    assert levels(panel) == before, "written before it was approved"
    panel.write("INST:NSEL 1")  # someone moves the selection while it waits
    await grant(gateway, olga, req, task)
    after = levels(panel)
    assert after[2][0] == 5 and after[1] == before[1] and after[3] == before[3]
    assert panel.query("SYST:ERR?") == NO_ERROR


async def test_apply_names_its_channel(
        supply: Any, gateway: Gateway, olga: Principal, panel: Any) -> None:
    task = asyncio.ensure_future(in_thread(supply.write, "APPL CH3,3,0.25"))
    req = await next_pending(gateway)
    assert [(a.channel, a.canonical) for a in req.actions] == [  # :APPLy selects, too
        (3, "INST:NSEL 3"), (3, "SOUR3:VOLT 3.0"), (3, "SOUR3:CURR 0.25")]
    await grant(gateway, olga, req, task)
    assert levels(panel)[3][:2] == (Decimal(3), Decimal("0.25"))


async def test_output_on_needs_the_setpoint_and_output_enable_and_is_read_back_from_on(
        supply: Any, gateway: Gateway, olga: Principal, panel: Any) -> None:
    panel.write("SOUR2:CURR 0.2;:SOUR2:VOLT 3")  # inside CH2's envelope
    task = asyncio.ensure_future(in_thread(supply.write, "INST:NSEL 2;:OUTP ON"))
    req = await next_pending(gateway)
    assert [(a.effect, a.channel, a.canonical) for a in req.actions] == [
        ("select", 2, "INST:NSEL 2"), ("output", 2, "OUTP CH2,ON")]
    assert set(req.required) == {ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE}
    assert levels(panel)[2][2] == "OFF"
    await grant(gateway, olga, req, task)  # executed: the read-back ON was judged as 1
    assert [levels(panel)[ch][2] for ch in (1, 2, 3)] == ["OFF", "ON", "OFF"]


@pytest.mark.parametrize(("message", "words"), [
    ("INST CH2;:VOLT 6.1", "CH2 voltage 6.1 V is above the bench limit of 6.0 V"),
    ("SOUR3:CURR 0.75", "CH3 current 0.75 A is above the bench limit of 0.5 A"),
    ("APPL CH1,13", "CH1 voltage 13.0 V is above the bench limit of 12.0 V"),
])
async def test_the_envelope_applies_per_channel(
        supply: Any, gateway: Gateway, panel: Any, message: str, words: str) -> None:
    before = levels(panel)

    def script() -> str:
        supply.write(message)
        return str(supply.query("SYST:ERR?"))

    error = await in_thread(script)
    assert error.startswith("-222,") and words in error, error
    assert not gateway.list_requests(status=Status.PENDING)
    assert levels(panel) == before


async def test_output_on_over_a_level_beyond_the_channels_envelope_is_refused(
        supply: Any, gateway: Gateway, panel: Any) -> None:
    panel.write("SOUR3:CURR 0.1;:SOUR3:VOLT 5")  # at the bench, output off: beyond 3.3 V

    def script() -> str:
        supply.write("OUTP CH3,ON")
        return str(supply.query("SYST:ERR?"))

    error = await in_thread(script)
    assert error.startswith("-222,") and "CH3" in error, error
    assert not gateway.list_requests(status=Status.PENDING)
    assert levels(panel)[3][2] == "OFF"


async def test_tracking_needs_every_approval(
        supply: Any, gateway: Gateway, olga: Principal, panel: Any) -> None:
    """CH2 follows CH1's setpoints: both channels change, so it is judged by a person and
    by the read-back. Without a channel it would mean the panel's selection: refused."""
    def bare() -> str:
        supply.write("OUTP:TRAC ON")
        return str(supply.query("SYST:ERR?"))

    assert (await in_thread(bare)).startswith("-109,")  # a parameter missing
    task = asyncio.ensure_future(in_thread(supply.write, "OUTP:TRAC CH1,ON"))
    req = await next_pending(gateway)
    assert [(a.effect, a.canonical) for a in req.actions] == [("state", "OUTP:TRAC CH1,ON")]
    assert set(req.required) == set(ApprovalKind)
    assert panel.query("OUTP:TRAC? CH1") == "OFF"
    await grant(gateway, olga, req, task)
    assert panel.query("OUTP:TRAC? CH1") == "ON"


async def test_the_emergency_stop_switches_every_output_off(
        gateway: Gateway, olga: Principal, panel: Any) -> None:
    panel.write("SOUR1:VOLT 1;:OUTP CH1,ON;:OUTP CH3,ON")  # energized at the bench
    assert [levels(panel)[ch][2] for ch in (1, 2, 3)] == ["ON", "OFF", "ON"]
    done = await gateway.emergency_stop(olga, "test", "dp832")
    assert all(f"OUTP CH{ch},OFF" in str(done) for ch in (1, 2, 3)), done
    assert [levels(panel)[ch][2] for ch in (1, 2, 3)] == ["OFF", "OFF", "OFF"]
    assert panel.query("SYST:ERR?") == NO_ERROR
