"""The Siglent SPD3303X (profile spd3303x), a supply with no output-state query: its outputs
are read from bits 4 and 5 of ``SYSTem:STATus?`` (its profile and simulator:
test_extra_instruments.py). CH1 and CH2 are named by a header prefix (``CH1:VOLT``) or,
left out, by the selection, which the gateway keeps per connection and always writes out.
Through the socket door, with real pyvisa clients over TCP: reads pass; a setpoint is held
and, once approved, reaches its channel alone (proven on the simulator's own port);
``OUTP CH1,ON`` needs the setpoint and output enable approvals and is read back from the
status bit; the envelope applies per channel; series/parallel tracking is refused
(independent needs every approval); the emergency stop switches every output off; a
channel with no status bit (CH3) cannot be read, so it counts as energized.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench_gate.config import BenchConfig, ChannelLimits
from bench_gate.errors import InstrumentError
from bench_gate.gateway import Gateway
from bench_gate.models import ApprovalKind, Principal, Status
from bench_gate.scpi import ScpiError, classify, get_profile
from bench_gate.snapshots import normalize
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import own_port, served_bench
from tests.doors.proxy.test_proxy import in_thread, next_pending

PROFILE = "spd3303x"
NO_ERROR = '0,"No error"'
LIMITS = {1: ChannelLimits(voltage=Decimal(12), current=Decimal(1)),
          2: ChannelLimits(voltage=Decimal(6), current=Decimal("0.5"))}


@pytest.fixture
def supply_sim() -> Iterator[SimServedThread]:
    with SimServedThread("spd3303x") as served:
        yield served


@pytest.fixture
def config(sim: SimBenchThread, supply_sim: SimServedThread) -> BenchConfig:
    return served_bench(sim, "spd", supply_sim, PROFILE, LIMITS)


@pytest.fixture
def supply(open_client: Callable[..., Any]) -> Any:
    """A script's connection to the SPD3303X's socket door."""
    return open_client("spd")


@pytest.fixture
def panel(supply_sim: SimServedThread) -> Iterator[Any]:
    """The simulator's own port: the supply's real state, not what the gateway says."""
    with own_port(supply_sim.resource_name) as res:
        yield res


def outputs(panel: Any) -> tuple[bool, bool]:
    """CH1's and CH2's output, from SYST:STAT? bits 4 and 5 on the simulator's own port."""
    word = int(panel.query("SYST:STAT?"), 16)
    return bool(word >> 4 & 1), bool(word >> 5 & 1)


def levels(panel: Any) -> dict[int, tuple[Decimal, Decimal]]:
    return {ch: (Decimal(panel.query(f"CH{ch}:VOLT?")), Decimal(panel.query(f"CH{ch}:CURR?")))
            for ch in (1, 2)}


async def grant(gateway: Gateway, olga: Principal, req: Any, task: Any) -> None:
    result = await gateway.grant(req.id, olga, list(req.required),
                                 proposal_hash=req.proposal_hash)
    assert result.request.status is Status.EXECUTED, result.request.outcome
    await task


def test_the_output_is_read_from_its_channels_status_bit_and_fails_closed_without() -> None:
    profile = get_profile(PROFILE)
    assert normalize(profile, "output", "0x0014", channel=1) == "1"  # bit 4
    assert normalize(profile, "output", "0x0014", channel=2) == "0"  # bit 5 clear
    assert normalize(profile, "output", "0x0024", channel=2) == "1"
    with pytest.raises(InstrumentError):  # CH3: no bit says it
        normalize(profile, "output", "0x0034", channel=3)
    with pytest.raises(InstrumentError):
        normalize(profile, "output", "garbled", channel=1)


def test_the_prefix_names_the_channel_and_ch3_takes_no_setpoint() -> None:
    assert classify("VOLT 5", PROFILE, selected=2).canonical == ("CH2:VOLT 5.0",)
    assert classify("OUTP CH1,1", PROFILE).canonical == ("OUTP CH1,ON",)
    assert classify("MEAS:CURR?", PROFILE, selected=2).canonical == ("MEAS:CURR? CH2",)
    with pytest.raises(Exception, match="-114"):
        classify("CH3:VOLT 5", PROFILE)


READS = ["*IDN?", "INST?", "VOLT?", "CURR?", "CH1:VOLT?", "MEAS:VOLT?", "MEAS:CURR? CH1",
         "MEAS:POWE?", "SYST:STAT?", "SYST:VERS?", "DHCP?"]


async def test_reads_pass_at_once_on_the_connections_selection(
        supply: Any, gateway: Gateway, panel: Any) -> None:
    panel.write("CH2:VOLT 4.5")

    def script() -> tuple[dict[str, str], str]:
        supply.write("INST CH2")
        answers = {q: supply.query(q) for q in READS}
        return answers, supply.query("SYST:ERR?")

    answers, error = await in_thread(script)
    assert all(answers.values()), answers
    assert error == NO_ERROR
    assert answers["INST?"] == "CH2" and Decimal(answers["VOLT?"]) == Decimal("4.5")
    assert not gateway.list_requests(), "a read was held"


async def test_a_setpoint_is_held_and_reaches_its_channel_alone(
        supply: Any, gateway: Gateway, olga: Principal, panel: Any) -> None:
    before = levels(panel)
    task = asyncio.ensure_future(in_thread(supply.write, "INST CH2;:VOLT 5"))
    req = await next_pending(gateway)
    assert [(a.effect, a.channel, a.canonical) for a in req.actions] == [
        ("select", 2, "INST CH2"), ("setpoint", 2, "CH2:VOLT 5.0")]
    assert set(req.required) == {ApprovalKind.SETPOINT}
    assert levels(panel) == before, "written before it was approved"
    panel.write("INST CH1")  # someone moves the selection while it waits
    await grant(gateway, olga, req, task)
    after = levels(panel)
    assert after[2][0] == 5 and after[1] == before[1]
    assert panel.query("SYST:ERR?") == NO_ERROR


async def test_output_on_needs_the_setpoint_and_output_enable_and_is_read_back_from_its_bit(
        supply: Any, gateway: Gateway, olga: Principal, panel: Any) -> None:
    panel.write("CH1:CURR 0.2;:CH1:VOLT 3")  # inside CH1's envelope
    task = asyncio.ensure_future(in_thread(supply.write, "OUTP CH1,ON"))
    req = await next_pending(gateway)
    assert [(a.effect, a.channel, a.canonical) for a in req.actions] == [
        ("output", 1, "OUTP CH1,ON")]
    assert set(req.required) == {ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE}
    assert outputs(panel) == (False, False)
    await grant(gateway, olga, req, task)  # executed: the read-back's bit 4 says on
    assert outputs(panel) == (True, False)


@pytest.mark.parametrize(("message", "words"), [
    ("INST CH2;:VOLT 6.1", "CH2 voltage 6.1 V is above the bench limit of 6.0 V"),
    ("CH1:CURR 1.5", "CH1 current 1.5 A is above the bench limit of 1.0 A"),
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
    panel.write("CH2:CURR 0.1;:CH2:VOLT 9")  # at the bench, output off: beyond 6 V

    def script() -> str:
        supply.write("OUTP CH2,ON")
        return str(supply.query("SYST:ERR?"))

    error = await in_thread(script)
    assert error.startswith("-222,") and "CH2" in error, error
    assert not gateway.list_requests(status=Status.PENDING)
    assert outputs(panel) == (False, False)


@pytest.mark.parametrize("mode", [1, 2])
async def test_series_and_parallel_are_refused(supply: Any, panel: Any, mode: int) -> None:
    """Series and parallel join the terminals: no channel's envelope bounds the sum
    (tests/test_review_holes_3.py). Refused through the door, never held."""
    error = await in_thread(lambda: (supply.write(f"OUTP:TRACK {mode}"),
                                     supply.query("SYST:ERR?"))[1])
    assert error.startswith("-222,") and f"mode {mode} is outside" in error, error
    assert int(panel.query("SYST:STAT?"), 16) >> 2 & 3 == 0b01  # still independent


async def test_independent_tracking_needs_every_approval(
        supply: Any, gateway: Gateway, olga: Principal, panel: Any) -> None:
    task = asyncio.ensure_future(in_thread(supply.write, "OUTP:TRACK 0"))
    req = await next_pending(gateway)
    assert [(a.effect, a.canonical) for a in req.actions] == [("state", "OUTP:TRACK 0")]
    assert set(req.required) == set(ApprovalKind)
    await grant(gateway, olga, req, task)
    assert int(panel.query("SYST:STAT?"), 16) >> 2 & 3 == 0b01


async def test_the_emergency_stop_switches_every_output_off(
        gateway: Gateway, olga: Principal, panel: Any) -> None:
    panel.write("CH1:VOLT 1;:OUTP CH1,ON;:OUTP CH2,ON;:OUTP CH3,ON")  # energized at the bench
    assert outputs(panel) == (True, True)
    done = await gateway.emergency_stop(olga, "test", "spd")
    assert all(f"OUTP CH{ch},OFF" in str(done) for ch in (1, 2, 3)), done
    assert outputs(panel) == (False, False)
    assert panel.query("MEAS:VOLT? CH3") == "0.000"  # the fixed output too
    assert panel.query("SYST:ERR?") == NO_ERROR


async def test_ch3_whose_output_no_bit_reports_is_never_confirmed_on(
        supply: Any, gateway: Gateway, olga: Principal, panel: Any) -> None:
    """Switching the fixed output on is held like any output; nothing can read its state
    back, so it ends ambiguous (unconfirmed), never executed and never "nothing took
    effect"."""
    task = asyncio.ensure_future(in_thread(supply.write, "OUTP CH3,ON"))
    req = await next_pending(gateway)
    assert [(a.effect, a.channel, a.canonical) for a in req.actions] == [
        ("output", 3, "OUTP CH3,ON")]
    assert ApprovalKind.OUTPUT_ENABLE in req.required
    result = await gateway.grant(req.id, olga, list(req.required),
                                 proposal_hash=req.proposal_hash)
    await task
    assert result.request.status is Status.AMBIGUOUS, result.request.outcome
    assert "no query reads ch3.output" in str(result.request.outcome)
    assert panel.query("MEAS:VOLT? CH3") == "5.000"  # it is on: never reported as failed


async def test_the_live_state_shows_what_can_be_read_and_ch3_as_unknown(
        gateway: Gateway, panel: Any) -> None:
    panel.write("CH1:VOLT 2;:OUTP CH1,ON")
    state = await gateway.live_state("spd")
    assert state["channels"]["1"]["output"] == "1" and state["channels"]["2"]["output"] == "0"
    assert state["channels"]["1"]["voltage"] == "2.0"
    assert state["channels"]["3"]["output"] is None and state["channels"]["3"]["voltage"] is None


def test_a_profile_whose_expansion_names_itself_is_refused_not_a_crash(tmp_path: Path) -> None:
    """Found while writing this profile: INST CH{ch} expanding to itself recursed without
    end. A message that reaches such an expansion gets -100, never a RecursionError."""
    loop = tmp_path / "looping-spd.yaml"
    model = get_profile(PROFILE).model.model_copy(update={"name": "looping-spd"})
    commands = tuple(c.model_copy(update={"set": c.set.model_copy(
        update={"canonical": None, "expand": ("INST CH{ch}",)})})
        if c.header == "INSTrument[:SELect]" and c.set is not None else c
        for c in model.commands)
    loop.write_text(yaml.safe_dump(model.model_copy(update={"commands": commands})
                                   .model_dump(mode="json", exclude_defaults=True)))
    with pytest.raises(ScpiError, match="-100") as caught:
        classify("INST CH2", str(loop))
    assert "does not end" in str(caught.value)
