"""Slow measurements (issue 18): a legitimate slow reading never fails with -240.

The simulated 34465A takes as long over a reading as the real meter (NPLC x line period x
autozero, x samples, + trigger delay, x triggers), so a READ? at NPLC 100 takes about 4 s
while the gateway's link timeout stays its default 2 s: the gateway waits the link's timeout
plus what the meter was told makes the reading take, never more than the instrument's cap
(``max_reading_s``), and refuses (-222) a configuration whose every reading would exceed it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import pyvisa

from bench_gate.config import BenchConfig, InstrumentConfig, default_config
from bench_gate.errors import InstrumentError
from bench_gate.gateway import Gateway
from bench_gate.instruments import PyvisaLink
from bench_gate.models import EventType, Principal, Status
from bench_gate.states import TERMINAL
from sim_instruments import SimBenchThread
from tests.doors.proxy.test_proxy import in_thread, next_pending


@pytest.fixture
def meter(open_client: Any) -> Any:
    """A script's pyvisa connection to the meter's socket door, with a VISA timeout (15 s)
    that covers a reading at NPLC 100."""
    return open_client("dmm", timeout=15000)


@pytest.fixture
def panel(sim: SimBenchThread) -> Iterator[Any]:
    """The simulated meter's own port: what the instrument really holds."""
    rm = pyvisa.ResourceManager("@py")
    res = rm.open_resource(sim.dmm_resource_name, read_termination="\n",
                           write_termination="\n", timeout=15000)
    res.write("SIM:PANEL")
    yield res
    res.close()
    rm.close()


def _journal(gateway: Gateway, kind: EventType) -> list[dict[str, Any]]:
    return [e.data for run in gateway.store.list_runs()
            for e in gateway.store.journal(run.id, limit=1000) if e.type is kind]


async def test_a_reading_at_nplc_100_answers_with_the_default_link_timeout(
        meter: Any, panel: Any, gateway: Gateway, config: BenchConfig) -> None:
    dmm = next(ic for ic in config.instruments if ic.name == "dmm")
    assert dmm.timeout_ms == 2000  # the link's own timeout stays the default

    def script() -> tuple[str, str, str, str]:
        meter.write("VOLT:NPLC 100")
        slow = meter.query("READ?")
        slow_error = meter.query("SYST:ERR?")
        meter.write("VOLT:NPLC 10")
        return slow, slow_error, meter.query("READ?"), meter.query("SYST:ERR?")

    slow, slow_error, quick, quick_error = await in_thread(script)
    assert float(slow) == pytest.approx(0.0) and float(quick) == pytest.approx(0.0)
    assert slow_error.startswith("+0") and quick_error.startswith("+0")
    assert _journal(gateway, EventType.STEP_FAILED) == []
    readings = [e for e in _journal(gateway, EventType.READ_EXECUTED) if e["message"] == "READ?"]
    assert len(readings) == 2
    # The reading really took its integration: the meter holds NPLC 10 now, the gateway
    # allows the reading at NPLC 10 its 0.4 s on top of the link's timeout.
    assert float(panel.query("VOLT:NPLC?")) == 10
    assert gateway.instrument("dmm").extra_seconds("READ?") == pytest.approx(0.401)


async def test_a_configuration_beyond_the_cap_is_refused_and_never_sent(
        meter: Any, panel: Any, gateway: Gateway) -> None:
    def script() -> tuple[str, str, str]:
        meter.write("VOLT:NPLC 100")
        meter.write("SAMP:COUN 1000000")
        refused = meter.query("SYST:ERR?")
        meter.write("TRIG:COUN 2;:TRIG:DEL 3600")
        return refused, meter.query("SYST:ERR?"), meter.query("READ?")

    refused, again, reading = await in_thread(script)
    for error in (refused, again):
        assert error.startswith("-222,") and "60 s limit" in error and "at least" in error
    assert float(reading) == pytest.approx(0.0)  # the meter kept a reading it can take
    assert int(panel.query("SAMP:COUN?")) == 1
    assert float(panel.query("TRIG:COUN?")) == 1
    refusals = _journal(gateway, EventType.WRITE_REFUSED)
    assert [r["code"] for r in refusals] == [-222, -222]


@pytest.fixture
def config(sim: SimBenchThread, request: pytest.FixtureRequest) -> BenchConfig:
    """The default bench; parametrized indirectly, the meter's cap for one reading."""
    cfg = default_config(sim.psu_port, sim.dmm_port)
    for ic in cfg.instruments:
        ic.max_reading_s = getattr(request, "param", ic.max_reading_s)
    return cfg


@pytest.mark.parametrize("config", [0.5], indirect=True)
async def test_a_reading_longer_than_the_cap_fails_at_the_cap(
        meter: Any, panel: Any, gateway: Gateway) -> None:
    """With a cap of 0.5 s, a reading of 8 s fails with -240 once the link's 2 s and the
    cap are up: a client cannot hold the lane longer than that."""
    assert gateway.instrument("dmm").timing.cap == 0.5

    def script() -> tuple[str, str]:
        meter.write("VOLT:NPLC 100;:SAMP:COUN 2")  # 0.2 s at the fastest function: allowed
        meter.write("READ?")
        return meter.query("SYST:ERR?"), meter.query("*IDN?")

    failed, idn = await in_thread(script)
    assert failed.startswith("-240,") and "timed out" in failed
    assert "34465A" in idn
    # The link reconnected: the gateway no longer knows the meter's settings, so a reading
    # gets the whole cap until a *RST.
    assert gateway.instrument("dmm").timing.unknown
    assert gateway.instrument("dmm").extra_seconds("READ?") == 0.5
    assert float(panel.query("VOLT:NPLC?")) == 100


async def test_a_recall_makes_readings_wait_the_cap_and_a_reset_brings_defaults(
        meter: Any, gateway: Gateway, olga: Principal) -> None:
    """*RCL is held (every approval); once it ran, the gateway cannot know the recalled
    timing, so a reading gets the whole cap; an approved *RST brings the defaults back."""
    inst = gateway.instrument("dmm")
    for message, unknown, extra in (("*RCL 1", True, 60.0), ("*RST", False, 0.401)):
        task = asyncio.ensure_future(in_thread(meter.write, message))
        req = await next_pending(gateway)
        await gateway.grant(req.id, olga, list(req.required), proposal_hash=req.proposal_hash)
        await task
        for _ in range(600):  # the socket door's write returns once sent, not once run
            if gateway.get_request(req.id).status in TERMINAL:
                break
            await asyncio.sleep(0.05)
        assert gateway.get_request(req.id).status is Status.EXECUTED
        assert inst.timing.unknown is unknown
        assert inst.extra_seconds("READ?") == pytest.approx(extra)
        assert float(await in_thread(meter.query, "READ?")) == pytest.approx(0.0)


def test_a_pyvisa_link_waits_its_timeout_plus_the_extra(sim: SimBenchThread) -> None:
    link = PyvisaLink(InstrumentConfig(name="dmm", resource=sim.dmm_resource_name,
                                       profile="34465a", timeout_ms=2000, io="pyvisa"))
    try:
        link.write("VOLT:NPLC 100")
        assert float(link.query("READ?", extra_seconds=6.0)) == pytest.approx(0.0)
        with pytest.raises(InstrumentError, match="timed out"):  # back to its own 2 s
            link.query("READ?")
    finally:
        link.close()
