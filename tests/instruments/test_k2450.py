"""The Keithley 2450 SourceMeter (profile k2450) on the simulated bench (its profile and
simulator: test_extra_instruments.py). The simulated SMU limits and follows its source
function; through the socket door, with real pyvisa clients over TCP, its reads and measure
settings pass, its source levels and limits are held as setpoints, output on needs the
setpoint and the output enable, the envelope bounds the magnitude on its channel, a
resistance measurement (auto-ohms sources a test current) is held as excites, the emergency
stop switches its output off (proven on the simulator's own port), and PyMeasure's
Keithley2450 reads every property, unmodified, with no hold.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest

from bench.driver_corpus import NOT_2450
from bench_gate.config import BenchConfig, ChannelLimits
from bench_gate.gateway import Gateway
from bench_gate.models import ApprovalKind, Principal, Status
from bench_gate.proxy import Doors
from sim_instruments import SimBenchThread, SimServedThread, SimSmu
from tests.conftest import own_port, served_bench
from tests.doors.proxy.test_drivers import _read_properties
from tests.doors.proxy.test_proxy import in_thread, next_pending

PROFILE = "k2450"
NO_ERROR = '0,"No error"'
#: The bench's hard limits on the SMU's one channel.
LIMITS = ChannelLimits(voltage=Decimal(10), current=Decimal("0.1"))


@pytest.fixture
def smu_sim() -> Iterator[SimServedThread]:
    with SimServedThread("smu") as served:
        yield served


@pytest.fixture
def config(sim: SimBenchThread, smu_sim: SimServedThread) -> BenchConfig:
    return served_bench(sim, "smu", smu_sim, PROFILE, {1: LIMITS})


@pytest.fixture
def smu(open_client: Callable[..., Any]) -> Any:
    """A script's connection to the SMU's socket door."""
    return open_client("smu")


@pytest.fixture
def panel(smu_sim: SimServedThread) -> Iterator[Any]:
    """The simulator's own port: the SMU's real state, not what the gateway says."""
    with own_port(smu_sim.resource_name, panel=True) as res:
        yield res


# ------------------------------------------------------------------ the simulated SMU

def test_the_simulated_smu_limits_and_follows_its_function(smu_sim: SimServedThread) -> None:
    smu = smu_sim.instrument
    assert isinstance(smu, SimSmu)
    smu.handle_message(":SOUR:VOLT 5;:SOUR:VOLT:ILIM 0.001;:OUTP ON")
    assert smu.terminals() == pytest.approx((1.0, 0.001))  # 1 kΩ: the limit clamps 5 mA
    assert float(smu.handle_message(":MEAS:CURR?") or "nan") == pytest.approx(0.001)
    smu.handle_message(":SOUR:FUNC CURR")
    assert smu.handle_message(":OUTP?") == "0"  # the 2450 switches off with the function
    assert smu.terminals() == (0.0, 0.0)


# ------------------------------------------------------------------ through the socket door

READS = ["*IDN?", ":SOUR:VOLT?", ":SOUR:VOLT:ILIM?", ":SOUR:CURR:VLIM?", ":SOUR:FUNC?",
         "OUTPUT?", ":READ?", ":MEAS?", ":MEAS:CURR?", ":SENS:CURR:NPLC?", ":SENS:FUNC?",
         ":TRAC:STAT:AVER?", ":SOUR:VOLT:ILIM:TRIP?", ":OUTP:CURR:SMOD?", "*LANG?",
         ":SYST:ERR:COUN?", ":STAT:OPER:COND?"]


async def test_reads_and_measure_settings_pass_at_once(smu: Any, gateway: Gateway) -> None:
    def script() -> tuple[dict[str, str], str]:
        smu.write(":SENS:FUNC 'CURR';:SENS:CURR:NPLC 2;:SENS:CURR:RANG:AUTO 1")
        answers = {q: smu.query(q) for q in READS}
        return answers, smu.query("SYST:ERR?")

    answers, error = await in_thread(script)
    assert all(answers.values()), answers
    assert error.lstrip("+") == NO_ERROR
    assert answers[":SENS:FUNC?"] == '"CURR:DC"' and Decimal(answers[":SENS:CURR:NPLC?"]) == 2
    assert not gateway.list_requests(), "a read or a measure setting was held"


async def test_a_source_level_and_a_limit_are_held_as_setpoints(
        smu: Any, gateway: Gateway, olga: Principal, panel: Any) -> None:
    task = asyncio.ensure_future(in_thread(smu.write, ":SOUR:VOLT:LEV 2.5;:SOUR:VOLT:ILIM 0.05"))
    req = await next_pending(gateway)
    assert [(a.effect, a.channel, a.canonical) for a in req.actions] == [
        ("setpoint", 1, "SOUR1:VOLT 2.5"), ("setpoint", 1, "SOUR1:VOLT:ILIM 0.05")]
    assert set(req.required) == {ApprovalKind.SETPOINT}
    assert Decimal(panel.query(":SOUR:VOLT?")) == 0, "written before it was approved"
    result = await gateway.grant(req.id, olga, list(req.required),
                                 proposal_hash=req.proposal_hash)
    assert result.request.status is Status.EXECUTED, result.request.outcome
    await task
    assert Decimal(panel.query(":SOUR:VOLT?")) == Decimal("2.5")
    assert Decimal(panel.query(":SOUR:VOLT:ILIM?")) == Decimal("0.05")


async def test_output_on_needs_the_setpoint_and_the_output_enable(
        smu: Any, gateway: Gateway, olga: Principal, panel: Any) -> None:
    # The other function's voltage limit is under the envelope too (its default is 21 V).
    panel.write(":SOUR:CURR:VLIM 5")
    task = asyncio.ensure_future(in_thread(smu.write, "OUTPUT ON"))
    req = await next_pending(gateway)
    assert [(a.effect, a.channel) for a in req.actions] == [("output", 1)]
    assert set(req.required) == {ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE}
    # The approver sees every field the envelope bounds, in both source functions.
    assert gateway.get_request(req.id).handoff["setpoint_needed"] == [{
        "channel": 1, "voltage": "0.0", "current": "0.000105", "current_level": "0.0",
        "vlim": "5.0"}]
    assert panel.query(":OUTP?") == "0"
    result = await gateway.grant(req.id, olga, list(req.required),
                                 proposal_hash=req.proposal_hash)
    assert result.request.status is Status.EXECUTED, result.request.outcome
    await task
    assert panel.query(":OUTP?") == "1"


@pytest.mark.parametrize(("message", "words"), [
    (":SOUR:VOLT 12", "voltage 12.0 V is above the bench limit of 10.0 V"),
    (":SOUR:VOLT -12", "voltage -12.0 V is above the bench limit of 10.0 V"),  # bipolar
    (":SOUR:VOLT:ILIM 0.2", "current 0.2 A is above the bench limit of 0.1 A"),
    (":SOUR:VOLT MIN", "is above the bench limit"),  # -210 V
])
async def test_the_envelope_bounds_the_magnitude_on_the_smu_channel(
        smu: Any, gateway: Gateway, panel: Any, message: str, words: str) -> None:
    def script() -> str:
        smu.write(message)
        return str(smu.query("SYST:ERR?"))

    error = await in_thread(script)
    assert error.startswith("-222,") and "CH1" in error, error
    assert words in error
    assert not gateway.list_requests(status=Status.PENDING)
    assert Decimal(panel.query(":SOUR:VOLT?")) == 0
    assert Decimal(panel.query(":SOUR:VOLT:ILIM?")) == Decimal("0.000105")


async def test_output_on_over_a_negative_level_beyond_the_envelope_is_refused(
        smu: Any, gateway: Gateway, panel: Any) -> None:
    """The predicted state (the live level, the output on) is judged by its magnitude."""
    panel.write(":SOUR:VOLT -20;:SOUR:VOLT:ILIM 0.05")  # at the bench, with the output off

    def script() -> str:
        smu.write(":OUTP ON")
        return str(smu.query("SYST:ERR?"))

    error = await in_thread(script)
    assert error.startswith("-222,") and "-20" in error and "bench limit of 10.0" in error, error
    assert not gateway.list_requests(status=Status.PENDING)
    assert panel.query(":OUTP?") == "0"


async def test_a_resistance_measurement_is_held_as_excites(
        smu: Any, gateway: Gateway, olga: Principal) -> None:
    task = asyncio.ensure_future(in_thread(smu.write, ":SENS:FUNC 'RES'"))
    req = await next_pending(gateway)
    assert [a.effect for a in req.actions] == ["excites"]
    assert "test current" in req.actions[0].words  # what auto-ohms sources
    await gateway.grant(req.id, olga, list(req.required), proposal_hash=req.proposal_hash)
    await task
    assert gateway.get_request(req.id).status is Status.EXECUTED


async def test_the_emergency_stop_switches_the_smu_off(
        gateway: Gateway, olga: Principal, panel: Any) -> None:
    panel.write(":SOUR:VOLT 1;:OUTP ON")  # energized at the bench
    assert panel.query(":OUTP?") == "1"
    done = await gateway.emergency_stop(olga, "test", "smu")
    assert "OUTP1 0" in str(done)
    assert panel.query(":OUTP?") == "0"


async def test_pymeasure_keithley2450_reads_every_property(
        doors: Doors, gateway: Gateway, panel: Any) -> None:
    """Except what a real 2450 cannot answer either (bench/driver_corpus.py, NOT_2450):
    *OPT? is no command of the 2450 (Reference Manual, section 6, common commands);
    buffer_data sends the 2400's :TRAC:DATA? without the start and end the 2450 requires
    (refused -109 at once); mean_voltage and the like index a list the 2450's
    :TRAC:STAT:AVER? (one value) does not answer; ``error`` is next_error's old name."""
    keithley = pytest.importorskip("pymeasure.instruments.keithley")
    panel.write(":SOUR:VOLT 1.5;:SOUR:VOLT:ILIM 0.01")
    host, port = doors.addresses["smu"]
    meter = keithley.Keithley2450(f"TCPIP0::{host}::{port}::SOCKET", visa_library="@py",
                                  read_termination="\n", write_termination="\n",
                                  timeout=15000)
    try:
        values = await in_thread(_read_properties, meter, tuple(NOT_2450))
    finally:
        meter.adapter.close()
    assert gateway.list_requests() == [], "PyMeasure's Keithley2450 was held"
    assert values["source_voltage"] == 1.5 and values["compliance_current"] == 0.01
    assert values["source_enabled"] is False and values["source_mode"] == "voltage"
    assert {"current", "voltage", "means", "buffer_points", "wires"} <= set(values)


def test_the_driver_corpus_has_no_false_hold_and_no_unsafe_pass(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The figures in docs/scpi.md: the only refusals are PyMeasure's trailing ';'."""
    from bench.classify import CORPUS, corpus_report

    assert corpus_report(CORPUS) == 0
    lines = capsys.readouterr().out.splitlines()
    line = next(x for x in lines if x.startswith(f"{PROFILE}:"))
    assert "false holds 0," in line and line.endswith("unsafe passes 0")
    refused = [x for x in lines if x.startswith("  false refuse") and "Keithley2450" in x]
    assert len(refused) == 4
    assert all(re.search(r";[\'\"] \(pymeasure Keithley2450\)$", x) for x in refused), refused


async def test_syst_clear_clears_only_the_connections_own_errors(smu: Any, panel: Any) -> None:
    """``:SYSTem:CLEar`` empties the 2450's event log, which every client shares: like
    ``*CLS`` it is the gateway's own (local, never sent). The front panel's error survives
    on the simulator's own port; the script's own refusal is gone from its queue."""
    def script() -> tuple[str, str, str]:
        smu.write(":SOUR:VOLT 50")  # over the envelope: -222, this connection's own
        assert smu.query("*OPC?") == "1"
        panel.write("NOT:A:COMMAND")  # the panel's, on the instrument
        smu.write("SYST:CLE")
        opc = smu.query("*OPC?")
        return opc, panel.query("SYST:ERR?"), smu.query("SYST:ERR?;*ESR?")

    opc, theirs, mine = await in_thread(script)
    assert opc == "1"
    assert theirs == '-113,"Undefined header"', theirs
    error, esr = mine.split(";")
    # SYST:CLE leaves the event bits: the refusal's EXE (16), the panel's CME (32, shared)
    assert (error.lstrip("+"), esr) == (NO_ERROR, "48"), mine


async def test_a_compound_error_query_answers_the_refusal_in_place(smu: Any) -> None:
    """The socket door's own error units in a compound message on the 2450's profile
    (SYST:ERR:CODE? and :COUN? too): the refusal, not the instrument's empty queue."""
    def script() -> str:
        smu.write(":SOUR:VOLT 50")  # over the envelope: -222
        return str(smu.query("*ESR?;:SYST:ERR:COUN?;:SYST:ERR:CODE?;:SYST:ERR:COUN?;"
                             ":SYST:ERR?"))

    assert await in_thread(script) == f"16;+1;-222;+0;{NO_ERROR}"
