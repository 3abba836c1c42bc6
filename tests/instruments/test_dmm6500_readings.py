"""On the Keithley DMM6500 too, a reading measures with the function configured now: through
the socket door, with a real pyvisa client, ``:READ?``, ``:MEAS?``, ``INIT`` and ``*TRG``
pass while the function is passive and are held as ``excites`` while it drives current into
the DUT, whoever chose it (here the front panel: the simulator's own handle).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bench_gate.config import BenchConfig, InstrumentConfig, default_config
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from sim_instruments import SimBenchThread, SimServedThread
from tests.doors.proxy.test_proxy import in_thread, next_pending, until


@pytest.fixture
def dmm6500() -> Iterator[SimServedThread]:
    with SimServedThread("dmm6500") as served:
        yield served


@pytest.fixture
def config(sim: SimBenchThread, dmm6500: SimServedThread) -> BenchConfig:
    cfg = default_config(sim.psu_port, sim.dmm_port)
    cfg.instruments.append(InstrumentConfig(name="dmm6500", resource=dmm6500.resource_name,
                                            profile="dmm6500", socket_port=0))
    return cfg


@pytest.mark.parametrize(("function", "transducer", "words"), [
    ('"RES"', None, "DC test current"),
    ('"DIOD"', None, "forward-biases a diode"),
    ('"TEMP"', "RTD", "RTD or thermistor"),
])
async def test_a_reading_is_held_while_the_function_drives_the_dut(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal,
        dmm6500: SimServedThread, function: str, transducer: str | None, words: str) -> None:
    meter = open_client("dmm6500", timeout=15000)
    assert await in_thread(meter.query, ":READ?")  # DC volts: passes
    assert not gateway.list_requests()
    dmm6500.instrument.handle_message(f":SENS:FUNC {function}")
    if transducer:
        dmm6500.instrument.handle_message(f":SENS:TEMP:TRAN {transducer}")
    for trigger in (":READ?", ":MEAS?", "INIT", "*TRG"):
        seen = {r.id for r in gateway.list_requests()}
        send = meter.query if trigger.endswith("?") else meter.write
        task = asyncio.ensure_future(in_thread(send, trigger))
        req = await next_pending(gateway, seen)
        assert [a.effect for a in req.actions] == ["excites"], trigger
        assert words in req.handoff["reversibility"]
        await gateway.grant(req.id, olga, list(req.required), proposal_hash=req.proposal_hash)
        await task
        await until(lambda rid=req.id: gateway.get_request(rid).status is Status.EXECUTED)


async def test_a_thermocouple_reading_passes(
        open_client: Callable[..., Any], gateway: Gateway, dmm6500: SimServedThread) -> None:
    meter = open_client("dmm6500")
    dmm6500.instrument.handle_message(':SENS:FUNC "TEMP"')
    dmm6500.instrument.handle_message(":SENS:TEMP:TRAN TC")
    assert await in_thread(meter.query, ":READ?")
    assert await in_thread(meter.query, ":MEAS?")
    assert not gateway.list_requests()
