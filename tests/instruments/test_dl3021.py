"""The Rigol DL3021 electronic load (profile dl3021), a single-channel instrument with no
channel list and no suffix (its profile and simulator: test_extra_instruments.py).
Inside the gateway its units name channel 1, so the envelope applies; on the wire they are
bare, proven on the simulator's own port, which refuses a channel list as the DL3021 does.
Through the socket door, with real pyvisa clients over TCP: reads pass, the CC level is held
as a setpoint, the input on needs the setpoint and the output enable, the envelope bounds the
CC and CV levels, the function and the CR level need every approval, and the emergency stop
switches the input off. PyMeasure and QCoDeS have no DL3021 driver to run.
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
from bench_gate.scpi import Effect, classify, command_examples, get_profile, lex, query_examples
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import own_port, served_bench
from tests.doors.proxy.test_proxy import in_thread, next_pending

PROFILE = "dl3021"
NO_ERROR = '0,"No error"'
LIMITS = ChannelLimits(voltage=Decimal(20), current=Decimal(10))


@pytest.fixture
def load_sim() -> Iterator[SimServedThread]:
    with SimServedThread("dl3021") as served:
        yield served


@pytest.fixture
def config(sim: SimBenchThread, load_sim: SimServedThread) -> BenchConfig:
    return served_bench(sim, "load", load_sim, PROFILE, {1: LIMITS})


@pytest.fixture
def load(open_client: Callable[..., Any]) -> Any:
    """A script's connection to the load's socket door."""
    return open_client("load")


@pytest.fixture
def panel(load_sim: SimServedThread) -> Iterator[Any]:
    """The simulator's own port: the load's real state, not what the gateway says."""
    with own_port(load_sim.resource_name) as res:
        yield res


async def grant(gateway: Gateway, olga: Principal, req: Any, task: Any) -> None:
    result = await gateway.grant(req.id, olga, list(req.required),
                                 proposal_hash=req.proposal_hash)
    assert result.request.status is Status.EXECUTED, result.request.outcome
    await task


_PROFILE = get_profile(PROFILE)
_EVERY = frozenset(Effect) - {Effect.FORBIDDEN}
EXAMPLES = [e.message for e in command_examples(_PROFILE, _EVERY)
            + query_examples(_PROFILE, _EVERY)]


@settings(max_examples=100, deadline=None)
@given(message=st.sampled_from(EXAMPLES))
def test_every_unit_reaches_the_wire_bare(message: str) -> None:
    """Every command and query the profile knows goes out as one unit with no list; the
    input and its levels name channel 1 inside the gateway."""
    for unit in classify(message, PROFILE).units:
        texts = _PROFILE.wire(unit.canonical)
        assert texts is not None and len(texts) == 1, unit.canonical
        assert "(@" not in texts[0] and len(lex(texts[0])) == 1
        if unit.field in ("current", "voltage", "input"):
            assert unit.channel == 1


READS = ["*IDN?", "FUNC?", "CURR?", "VOLT?", "INP?", "MEAS:VOLT?", "MEAS:CURR?", "MEAS:POW?",
         "RES?", "CURR:VON?", "STAT:QUES:COND?", "SYST:VERS?"]


async def test_reads_pass_at_once(load: Any, gateway: Gateway, panel: Any) -> None:
    def script() -> tuple[dict[str, str], str]:
        answers = {q: load.query(q) for q in READS}
        return answers, load.query("SYST:ERR?")

    answers, error = await in_thread(script)
    assert all(answers.values()), answers
    assert error == NO_ERROR and answers["FUNC?"] == "CURR"
    assert Decimal(answers["MEAS:VOLT?"]) == 12
    assert not gateway.list_requests(), "a read was held"
    assert panel.query("SYST:ERR?") == NO_ERROR, "a channel list reached the wire"


async def test_the_cc_level_is_a_setpoint_and_the_input_needs_the_output_enable(
        load: Any, gateway: Gateway, olga: Principal, panel: Any) -> None:
    task = asyncio.ensure_future(in_thread(load.write, ":SOUR:CURR 2.5"))
    req = await next_pending(gateway)
    assert [(a.effect, a.channel, a.canonical) for a in req.actions] == [
        ("setpoint", 1, "CURR 2.5,(@1)")]
    assert set(req.required) == {ApprovalKind.SETPOINT}
    assert Decimal(panel.query("CURR?")) == 0, "written before it was approved"
    await grant(gateway, olga, req, task)
    assert Decimal(panel.query("CURR?")) == Decimal("2.5")

    task = asyncio.ensure_future(in_thread(load.write, ":INP ON"))
    req = await next_pending(gateway)
    assert [(a.effect, a.channel) for a in req.actions] == [("output", 1)]
    assert ApprovalKind.OUTPUT_ENABLE in req.required
    assert panel.query("INP?") == "0"
    await grant(gateway, olga, req, task)
    assert panel.query("INP?") == "1" and Decimal(panel.query("MEAS:CURR?")) == Decimal("2.5")
    assert panel.query("SYST:ERR?") == NO_ERROR


@pytest.mark.parametrize(("message", "words"), [
    ("CURR 12", "CH1 current 12.0 A is above the bench limit of 10.0 A"),
    ("VOLT 30", "CH1 voltage 30.0 V is above the bench limit of 20.0 V"),
])
async def test_the_envelope_bounds_the_cc_and_cv_levels(
        load: Any, gateway: Gateway, panel: Any, message: str, words: str) -> None:
    def script() -> str:
        load.write(message)
        return str(load.query("SYST:ERR?"))

    error = await in_thread(script)
    assert error.startswith("-222,") and words in error, error
    assert not gateway.list_requests(status=Status.PENDING)
    assert Decimal(panel.query("CURR?")) == 0 and Decimal(panel.query("VOLT?")) == 0


async def test_the_input_over_a_cc_level_beyond_the_envelope_is_refused(
        load: Any, gateway: Gateway, panel: Any) -> None:
    panel.write("CURR 15")  # at the bench, input off

    def script() -> str:
        load.write("INP ON")
        return str(load.query("SYST:ERR?"))

    error = await in_thread(script)
    assert error.startswith("-222,") and "15.0" in error, error
    assert panel.query("INP?") == "0"


@pytest.mark.parametrize("message", ["FUNC RES", "RES 10"])
async def test_the_function_and_the_cr_level_need_every_approval(
        load: Any, gateway: Gateway, olga: Principal, panel: Any, message: str) -> None:
    """Which level applies, or a level outside the envelope's keys: judged by a person and
    by the read-back."""
    task = asyncio.ensure_future(in_thread(load.write, message))
    req = await next_pending(gateway)
    assert [a.effect for a in req.actions] == ["state"]
    assert set(req.required) == set(ApprovalKind)
    assert panel.query("FUNC?") == "CURR" and Decimal(panel.query("RES?")) != 10
    await grant(gateway, olga, req, task)
    assert panel.query("FUNC?") == "RES" or Decimal(panel.query("RES?")) == 10


async def test_the_emergency_stop_switches_the_input_off(
        gateway: Gateway, olga: Principal, panel: Any) -> None:
    panel.write("CURR 1;:INP ON")  # drawing from the DUT at the bench
    assert panel.query("INP?") == "1"
    done = await gateway.emergency_stop(olga, "test", "load")
    assert "INP 0,(@1)" in str(done)
    assert panel.query("INP?") == "0"
    assert panel.query("SYST:ERR?") == NO_ERROR, "the safe action reached the wire with a list"
