"""The Keithley DMM6500 multimeter (profile dmm6500) on the simulated bench (its profile and
simulator: test_extra_instruments.py). The simulated meter reads the function selected;
through the socket door, with real pyvisa clients over TCP, its passive functions and
settings pass, a function or setting that drives current into the DUT is held as excites
with what the meter applies, another command set is refused, and PyMeasure's
KeithleyDMM6500 reads every property, unmodified, with no hold.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest

from bench.driver_corpus import NOT_DMM6500
from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from bench_gate.proxy import Doors
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import served_bench
from tests.doors.proxy.test_drivers import _read_properties
from tests.doors.proxy.test_proxy import in_thread, next_pending

PROFILE = "dmm6500"
NO_ERROR = '0,"No error"'


@pytest.fixture
def dmm_sim() -> Iterator[SimServedThread]:
    with SimServedThread("dmm6500") as served:
        yield served


@pytest.fixture
def config(sim: SimBenchThread, dmm_sim: SimServedThread) -> BenchConfig:
    return served_bench(sim, "dmm6500", dmm_sim, PROFILE)


@pytest.fixture
def meter(open_client: Callable[..., Any]) -> Any:
    """A script's connection to the DMM6500's socket door."""
    return open_client("dmm6500")


def test_the_simulated_meter_reads_the_function_selected(dmm_sim: SimServedThread) -> None:
    dmm = dmm_sim.instrument
    assert dmm.handle_message(":SENS:FUNC?") == '"VOLT:DC"'  # as the DMM6500 names it
    assert float(dmm.handle_message(":MEAS:RES?") or "nan") == 1000.0
    assert dmm.handle_message(":SENS:FUNC?") == '"RES"'
    assert float(dmm.handle_message(":READ?") or "nan") == 1000.0


async def test_passive_functions_and_settings_pass(meter: Any, gateway: Gateway) -> None:
    def script() -> tuple[str, str, str, str, str]:
        meter.write(':SENS:FUNC "VOLT:AC";:SENS:VOLT:AC:DET:BAND 30')
        meter.write(":VOLT:DC:NPLC 10;:SENS:TEMP:TRAN TC;:DISP:VOLT:DIG 5")
        return (meter.query(":SENS:FUNC?"), meter.query(":SENS:VOLT:NPLC?"),
                meter.query(":MEAS:CURR?"), meter.query(":READ?"), meter.query("SYST:ERR?"))

    function, nplc, amps, reading, error = await in_thread(script)
    assert function == '"VOLT:AC"' and Decimal(nplc) == 10
    assert amps and reading and error.lstrip("+") == NO_ERROR
    assert not gateway.list_requests(), "a passive function or setting was held"


@pytest.mark.parametrize(("message", "words"), [
    (':SENS:FUNC "RES"', "test current"),
    (':SENS:FUNC "FRES"', "source leads"),
    (':SENS:FUNC "CONT"', "1 mA"),
    (":SENS:TEMP:TRAN RTD", "RTD or thermistor"),
    (":SENS:DIOD:BIAS:LEV 0.001", "forward-biases a diode"),
    (":MEAS:CAP?", "charges and discharges"),
])
async def test_a_function_that_drives_the_dut_is_held_with_what_it_applies(
        meter: Any, gateway: Gateway, olga: Principal, message: str, words: str) -> None:
    send = meter.query if message.endswith("?") else meter.write
    task = asyncio.ensure_future(in_thread(send, message))
    req = await next_pending(gateway)
    assert [a.effect for a in req.actions] == ["excites"]
    assert req.handoff["reversibility"].startswith("excites the DUT: the meter applies")
    assert words in req.handoff["reversibility"]
    await gateway.grant(req.id, olga, list(req.required), proposal_hash=req.proposal_hash)
    await task
    assert gateway.get_request(req.id).status is Status.EXECUTED


async def test_another_command_set_is_refused(meter: Any, gateway: Gateway) -> None:
    def script() -> tuple[str, str]:
        meter.write("*LANG TSP")
        return meter.query("SYST:ERR?"), meter.query("*LANG?")

    error, language = await in_thread(script)
    assert error.startswith("-203,") and "forbidden" in error
    assert language == "SCPI"
    assert not gateway.list_requests()


async def test_pymeasure_keithley_dmm6500_reads_every_property(
        doors: Doors, gateway: Gateway) -> None:
    """Except what a DMM6500 without a scanner card cannot answer in DC volts either
    (bench/driver_corpus.py, NOT_DMM6500): *OPT?, the AC bandwidth, the card's."""
    keithley = pytest.importorskip("pymeasure.instruments.keithley")
    host, port = doors.addresses["dmm6500"]
    dmm = keithley.KeithleyDMM6500(f"TCPIP0::{host}::{port}::SOCKET", visa_library="@py",
                                   read_termination="\n", write_termination="\n",
                                   timeout=15000)
    try:
        skip = (*NOT_DMM6500, *(n for n in dir(type(dmm)) if n.startswith("scan_")))
        values = await in_thread(_read_properties, dmm, skip)
    finally:
        dmm.adapter.close()
    assert gateway.list_requests() == [], "PyMeasure's KeithleyDMM6500 was held"
    assert values["mode"] == "voltage" and values["line_frequency"] == 50
    assert {"voltage", "resistance", "nplc", "range", "digits", "id"} <= set(values)


def test_the_driver_corpus_has_no_false_hold_and_no_unsafe_pass(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The figures in docs/scpi.md."""
    from bench.classify import CORPUS, corpus_report

    assert corpus_report(CORPUS) == 0
    line = next(x for x in capsys.readouterr().out.splitlines()
                if x.startswith(f"{PROFILE}:"))
    assert "false holds 0, false refusals 0" in line and line.endswith("unsafe passes 0")
