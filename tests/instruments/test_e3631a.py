"""The Keysight E3631A (profile e3631a), a supply that addresses its outputs by selection
(its profile and simulator: test_extra_instruments.py). Through the socket door, with
real pyvisa clients over TCP: reads pass; ``VOLT 5`` after ``INST:SEL P6V`` is held as a P6V
setpoint and, once approved, reaches P6V alone (proven on the simulator's own port, which
refuses channel lists as the E3631A does); ``OUTP ON`` needs each output's setpoint and
output enable; the envelope applies per output (the -25 V output by its magnitude); the
emergency stop switches the outputs off; one connection's selection never changes what
another's commands mean; and PyMeasure's KeysightE3631A reads every property with no hold.
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
from bench_gate.gateway import Gateway
from bench_gate.models import ApprovalKind, Principal, Status
from bench_gate.proxy import Doors
from bench_gate.scpi import Effect, classify, command_examples, get_profile, lex, query_examples
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import own_port, served_bench
from tests.doors.proxy.test_drivers import _read_properties
from tests.doors.proxy.test_proxy import POLL, POLLS, in_thread, next_pending

PROFILE = "e3631a"
NO_ERROR = '0,"No error"'
#: The bench's hard limits on each output (the -25 V output's by magnitude).
LIMITS = {1: ChannelLimits(voltage=Decimal(6), current=Decimal(1)),
          2: ChannelLimits(voltage=Decimal(12), current=Decimal("0.5")),
          3: ChannelLimits(voltage=Decimal(12), current=Decimal("0.5"))}


@pytest.fixture
def supply_sim() -> Iterator[SimServedThread]:
    with SimServedThread("e3631a") as served:
        yield served


@pytest.fixture
def config(sim: SimBenchThread, supply_sim: SimServedThread) -> BenchConfig:
    return served_bench(sim, "e3631a", supply_sim, PROFILE, LIMITS)


@pytest.fixture
def supply(open_client: Callable[..., Any]) -> Any:
    """A script's connection to the E3631A's socket door."""
    return open_client("e3631a")


@pytest.fixture
def panel(supply_sim: SimServedThread) -> Iterator[Any]:
    """The simulator's own port: the supply's real state, not what the gateway says."""
    with own_port(supply_sim.resource_name) as res:
        yield res


def levels(panel: Any) -> dict[int, tuple[Decimal, Decimal]]:
    """Each output's (voltage, current) setpoints, read on the simulator's own port."""
    return {ch: (Decimal(panel.query(f"INST:NSEL {ch};:VOLT?")),
                 Decimal(panel.query(f"INST:NSEL {ch};:CURR?"))) for ch in (1, 2, 3)}


async def approve(gateway: Gateway, olga: Principal, task: Any) -> Any:
    req = await next_pending(gateway)
    result = await gateway.grant(req.id, olga, list(req.required),
                                 proposal_hash=req.proposal_hash)
    assert result.request.status is Status.EXECUTED, result.request.outcome
    await task
    return req


# ------------------------------------------------------------------ the wire

def test_a_channel_unit_reaches_the_wire_as_its_selection_then_the_bare_unit() -> None:
    profile = get_profile(PROFILE)
    assert profile.wire("VOLT 5.0,(@1)") == ("INST:NSEL 1", "VOLT 5.0")
    assert profile.wire("MEAS:CURR? (@3)") == ("INST:NSEL 3", "MEAS:CURR?")
    assert profile.wire("OUTP 0") == ("OUTP 0",)  # the safe action needs no selection
    assert profile.wire('DISP:TEXT "(@1)"') == ('DISP:TEXT "(@1)"',)  # data, not a list
    assert profile.wire("VOLT 5.0,(@1,2)") is None  # never half a list
    assert get_profile("e36312a").wire("VOLT 5.0,(@1)") == ("VOLT 5.0,(@1)",)


_PROFILE = get_profile(PROFILE)
_EVERY = frozenset(Effect) - {Effect.FORBIDDEN}
EXAMPLES = [e.message for e in command_examples(_PROFILE, _EVERY)
            + query_examples(_PROFILE, _EVERY)]


@settings(max_examples=200, deadline=None)
@given(message=st.sampled_from(EXAMPLES), selected=st.sampled_from([None, 1, 2, 3]))
def test_every_unit_reaches_the_wire_selected_and_without_a_list(
        message: str, selected: int | None) -> None:
    """For every command and query the profile knows, under any selection: each unit that
    names an output goes out as that output's select command, then one bare unit."""
    for unit in classify(message, PROFILE, selected=selected).units:
        texts = _PROFILE.wire(unit.canonical)
        assert texts is not None, unit.canonical
        assert all("(@" not in t and len(lex(t)) == 1 for t in texts), texts
        if unit.channel is not None and "(@" in unit.canonical:
            assert texts[0] == f"INST:NSEL {unit.channel}" and len(texts) == 2
        else:
            assert texts == (unit.canonical,)


# ------------------------------------------------------------------ through the socket door

READS = ["*IDN?", "INST:SEL?", "INST:NSEL?", "VOLT?", "CURR?", "MEAS:VOLT?", "MEAS:CURR?",
         "APPL? P25V", "APPL?", "OUTP?", "OUTP:TRAC?", "SYST:VERS?", "STAT:QUES?",
         "STAT:QUES:INST:ISUM3:COND?", "*STB?"]


async def test_reads_pass_at_once_on_the_selected_output(
        supply: Any, gateway: Gateway, panel: Any) -> None:
    panel.write("INST:NSEL 2;:VOLT 7.5")  # set at the bench; the panel's selection: P25V

    def script() -> tuple[dict[str, str], str]:
        supply.write("INST:SEL P25V")
        answers = {q: supply.query(q) for q in READS}
        return answers, supply.query("SYST:ERR?")

    panel.write("INST:NSEL 1")  # the instrument's selection is never trusted
    answers, error = await in_thread(script)
    assert all(answers.values()), answers
    assert error.lstrip("+") == NO_ERROR
    assert answers["INST:SEL?"] == "P25V" and answers["INST:NSEL?"] == "2"
    assert Decimal(answers["VOLT?"]) == Decimal("7.5")
    assert not gateway.list_requests(), "a read was held"
    assert panel.query("SYST:ERR?").lstrip("+") == NO_ERROR, "a channel list reached the wire"


async def test_a_setpoint_after_a_selection_is_held_for_that_output_and_reaches_it_alone(
        supply: Any, gateway: Gateway, olga: Principal, panel: Any) -> None:
    panel.write("INST:NSEL 3")  # the instrument's own selection: N25V
    before = levels(panel)
    task = asyncio.ensure_future(in_thread(supply.write, "INST:SEL P6V;:VOLT 5"))
    req = await next_pending(gateway)
    assert [(a.effect, a.channel, a.canonical) for a in req.actions] == [
        ("select", 1, "INST:NSEL 1"), ("setpoint", 1, "VOLT 5.0,(@1)")]
    assert set(req.required) == {ApprovalKind.SETPOINT}
    assert levels(panel) == before, "written before it was approved"
    panel.write("INST:NSEL 2")  # someone moves the selection while it waits
    await approve_pending(gateway, olga, req, task)
    after = levels(panel)
    assert after[1] == (Decimal(5), before[1][1])
    assert after[2] == before[2] and after[3] == before[3]
    assert panel.query("SYST:ERR?").lstrip("+") == NO_ERROR


async def approve_pending(gateway: Gateway, olga: Principal, req: Any, task: Any) -> None:
    result = await gateway.grant(req.id, olga, list(req.required),
                                 proposal_hash=req.proposal_hash)
    assert result.request.status is Status.EXECUTED, result.request.outcome
    await task


async def test_apply_names_its_output(
        supply: Any, gateway: Gateway, olga: Principal, panel: Any) -> None:
    task = asyncio.ensure_future(in_thread(supply.write, "APPL N25V,-5,0.25"))
    req = await approve(gateway, olga, task)
    assert [(a.channel, a.canonical) for a in req.actions] == [  # APPLy selects, too
        (3, "INST:NSEL 3"), (3, "VOLT -5.0,(@3)"), (3, "CURR 0.25,(@3)")]
    assert levels(panel)[3] == (Decimal(-5), Decimal("0.25"))


async def test_output_on_needs_every_outputs_setpoint_and_the_output_enable(
        supply: Any, gateway: Gateway, olga: Principal, panel: Any) -> None:
    panel.write("INST:NSEL 2;:CURR 0.1;:INST:NSEL 3;:CURR 0.1")  # inside the envelope
    task = asyncio.ensure_future(in_thread(supply.write, "OUTP ON"))
    req = await next_pending(gateway)
    assert [(a.effect, a.channel, a.canonical) for a in req.actions] == [
        ("output", 1, "OUTP 1"), ("output", 2, "OUTP 1"), ("output", 3, "OUTP 1")]
    assert set(req.required) == {ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE}
    assert panel.query("OUTP?") == "0"
    await approve_pending(gateway, olga, req, task)
    assert panel.query("OUTP?") == "1"


async def test_a_stale_output_on_is_proposed_again_as_one_unit_per_output(
        supply: Any, gateway: Gateway, olga: Principal, panel: Any) -> None:
    """The fresh request is built from the canonical units the approver saw: OUTP 1 once
    per output, never once per output per output."""
    panel.write("INST:NSEL 2;:CURR 0.1;:INST:NSEL 3;:CURR 0.1")  # inside the envelope
    task = asyncio.ensure_future(in_thread(supply.write, "OUTP ON"))
    first = await next_pending(gateway)
    panel.write("INST:NSEL 1;:VOLT 2")  # someone at the bench changes it meanwhile
    stale = await gateway.grant(first.id, olga, list(first.required),
                                proposal_hash=first.proposal_hash)
    assert stale.request.status is Status.STALE and stale.request.superseded_by
    fresh = gateway.get_request(stale.request.superseded_by)
    assert [(a.channel, a.canonical) for a in fresh.actions] == [
        (1, "OUTP 1"), (2, "OUTP 1"), (3, "OUTP 1")]
    await approve_pending(gateway, olga, fresh, task)
    assert panel.query("OUTP?") == "1"


@pytest.mark.parametrize(("message", "words"), [
    ("INST:SEL P6V;:VOLT 6.1", "CH1 voltage 6.1 V is above the bench limit of 6.0 V"),
    ("INST:NSEL 2;:CURR 0.75", "CH2 current 0.75 A is above the bench limit of 0.5 A"),
    ("INST:SEL N25V;:VOLT -15", "CH3 voltage -15.0 V is above the bench limit of 12.0 V"),
    ("APPL N25V,-20,0.1", "CH3 voltage -20.0 V is above the bench limit of 12.0 V"),
])
async def test_the_envelope_applies_per_output(
        supply: Any, gateway: Gateway, panel: Any, message: str, words: str) -> None:
    before = levels(panel)

    def script() -> str:
        supply.write(message)
        return str(supply.query("SYST:ERR?"))

    error = await in_thread(script)
    assert error.startswith("-222,") and words in error, error
    assert not gateway.list_requests(status=Status.PENDING)
    assert levels(panel) == before


@pytest.mark.parametrize("refused", [
    "INST:SEL P6V;:VOLT 6.1",  # refused by the envelope on the command's own level
    "INST:NSEL 3;:OUTP ON",  # refused on the predicted state: CH3 set to -20 V at the bench
])
async def test_a_refused_message_leaves_the_runs_selection_where_it_was(
        supply: Any, gateway: Gateway, panel: Any, olga: Principal, refused: str) -> None:
    """Nothing of a refused message runs, its selection included: the refused ``INST:SEL
    P6V`` moved the run's selection, so the script's next bare ``VOLT 3`` (meant, as the
    gateway answered, for the output it had selected) was held for another output."""
    panel.write("INST:NSEL 3;:VOLT -20")  # beyond CH3's envelope, outputs off

    def script() -> tuple[str, str]:
        supply.write("INST:NSEL 2")
        supply.write(refused)
        error = str(supply.query("SYST:ERR?"))
        return error, str(supply.query("INST:NSEL?"))

    error, selected = await in_thread(script)
    assert error.startswith("-222,"), error
    assert selected.strip() == "2"
    task = asyncio.ensure_future(in_thread(supply.write, "VOLT 3"))
    req = await next_pending(gateway)
    assert [a.canonical for a in req.actions] == ["VOLT 3.0,(@2)"]
    await gateway.deny(req.id, olga, "not now", proposal_hash=req.proposal_hash)
    await task


async def test_output_on_over_a_level_beyond_one_outputs_envelope_is_refused(
        supply: Any, gateway: Gateway, panel: Any) -> None:
    """The predicted state of every output the command switches on is judged."""
    panel.write("INST:NSEL 2;:CURR 0.1;:INST:NSEL 3;:CURR 0.1")  # inside the envelope
    panel.write("INST:NSEL 3;:VOLT -20")  # at the bench, outputs off: beyond CH3's 12 V

    def script() -> str:
        supply.write("OUTP ON")
        return str(supply.query("SYST:ERR?"))

    error = await in_thread(script)
    assert error.startswith("-222,") and "CH3" in error and "-20" in error, error
    assert not gateway.list_requests(status=Status.PENDING)
    assert panel.query("OUTP?") == "0"


async def test_the_emergency_stop_switches_the_outputs_off(
        gateway: Gateway, olga: Principal, panel: Any) -> None:
    panel.write("INST:NSEL 1;:VOLT 1;:OUTP ON")  # energized at the bench
    assert panel.query("OUTP?") == "1"
    done = await gateway.emergency_stop(olga, "test", "e3631a")
    assert "OUTP 0" in str(done)
    assert panel.query("OUTP?") == "0"
    assert panel.query("SYST:ERR?").lstrip("+") == NO_ERROR


async def test_a_selection_on_one_connection_does_not_move_another(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal,
        panel: Any) -> None:
    first, second = open_client("e3631a"), open_client("e3631a")

    def select_and_read() -> tuple[str, str]:
        first.write("INST:SEL N25V")
        return first.query("INST:SEL?"), second.query("INST:SEL?")

    mine, theirs = await in_thread(select_and_read)
    assert (mine, theirs) == ("N25V", "P6V")
    task = asyncio.ensure_future(in_thread(second.write, "VOLT 2"))
    req = await next_pending(gateway)
    assert [(a.channel, a.canonical) for a in req.actions] == [(1, "VOLT 2.0,(@1)")]
    await approve_pending(gateway, olga, req, task)
    assert levels(panel)[1][0] == 2 and levels(panel)[3][0] == 0


async def test_a_channel_list_the_e3631a_does_not_take_is_refused(
        supply: Any, gateway: Gateway) -> None:
    """PyMeasure's output_enabled setter writes ``OUTPut 1, (@1)``: OUTPut switches every
    output at once, so no list can narrow it."""
    def script() -> str:
        supply.write("OUTP 1, (@1)")
        return str(supply.query("SYST:ERR?"))

    error = await in_thread(script)
    assert error.startswith("-108,"), error
    assert not gateway.list_requests()


async def _held_or_answered(gateway: Gateway, task: Any) -> Any:
    """The request a message is held as, or None once the script has its answer (bounded)."""
    for _ in range(POLLS):
        pending = gateway.list_requests(status=Status.PENDING)
        if pending:
            return gateway.get_request(pending[0].id)
        if task.done():
            return None
        await asyncio.sleep(POLL)
    raise AssertionError("neither held nor answered")


@pytest.mark.parametrize("message", ["INST:COUP (@2)", "INST:COUP (@1,2)",
                                     "inst:couple:trigger (@1:3)", ":INST:COUP ( @ 3 )"])
async def test_a_channel_list_given_as_data_is_refused_never_sent_without_it(
        message: str, supply: Any, gateway: Gateway, olga: Principal, panel: Any) -> None:
    """INSTrument:COUPle takes ALL, NONE or the outputs' names (P6V,P25V) on the E3631A,
    which takes no channel lists. ``INST:COUP (@2)`` was held; approved, the supply got
    ``INST:NSEL 2`` and a bare ``INST:COUP``: the gateway stripped the list as if it were its
    own addressing list, so what reached the instrument was not the text approved (and
    ``(@1,2)`` was held, then could not be sent at all). Refused at once (-224), nothing
    held, nothing sent."""
    def script() -> str:
        supply.write(message)
        return str(supply.query("SYST:ERR?"))

    task = asyncio.ensure_future(in_thread(script))
    held = await _held_or_answered(gateway, task)
    if held is not None:
        result = await gateway.grant(held.id, olga, list(held.required),
                                     proposal_hash=held.proposal_hash)
        await task
        receipt = result.request.receipt
        pytest.fail(f"{message!r} was held as {[a.canonical for a in held.actions]} and, "
                    f"approved, ended {result.request.status.value}: the supply got "
                    f"{receipt.sent if receipt else []}")
    error = await task
    assert error.startswith("-224,") and "channel list" in error, error
    assert not gateway.list_requests()
    assert panel.query("INST:COUP?") == "NONE"
    assert panel.query("SYST:ERR?").lstrip("+") == NO_ERROR


async def test_pymeasure_keysight_e3631a_reads_every_property(
        doors: Doors, gateway: Gateway, panel: Any) -> None:
    """Every property of the instrument and of each output, unmodified, no hold. Skipped:
    ``options`` (*OPT? is no command of the E3631A, chapter 4's common commands)."""
    keysight = pytest.importorskip("pymeasure.instruments.keysight")
    panel.write("INST:NSEL 2;:VOLT 3.5;:CURR 0.2")
    host, port = doors.addresses["e3631a"]
    supply = keysight.KeysightE3631A(f"TCPIP0::{host}::{port}::SOCKET", visa_library="@py",
                                     read_termination="\n", write_termination="\n",
                                     timeout=15000)
    try:
        values = await in_thread(_read_properties, supply, ("options",))
        outputs = [await in_thread(_read_properties, ch) for ch in
                   (supply.ch_1, supply.ch_2, supply.ch_3)]
    finally:
        supply.adapter.close()
    assert gateway.list_requests() == [], "PyMeasure's KeysightE3631A was held"
    assert values["output_enabled"] is False and values["tracking_enabled"] is False
    assert outputs[1]["voltage_setpoint"] == 3.5 and outputs[1]["current_limit"] == 0.2
    assert outputs[0]["voltage_setpoint"] == 0 and outputs[2]["voltage_setpoint"] == 0
    assert panel.query("SYST:ERR?").lstrip("+") == NO_ERROR


def test_the_driver_corpus_has_no_false_hold_and_no_unsafe_pass(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The figures in docs/scpi.md: PyMeasure's KeysightE3631A, 34 messages."""
    from bench.classify import CORPUS, corpus_report

    assert corpus_report(CORPUS) == 0
    line = next(x for x in capsys.readouterr().out.splitlines()
                if x.startswith(f"{PROFILE}:"))
    assert "false holds 0, false refusals 0" in line and line.endswith("unsafe passes 0")
