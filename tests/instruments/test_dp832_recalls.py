"""Two recalls in one message on a supply whose profile does not say what ``*RCL``
restores (the Rigol DP832): each field may keep its value from before the recall.

Hole 5: the second recall was judged against the first one's record as if the first had
restored every field. With CH2 on at 1 V (envelope 6 V), slot 1 holding CH2 off at 1 V and
slot 2 CH2 off at 20 V, ``*RCL 2`` alone is refused (-222: the output may stay on while the
level comes back at 20 V), but ``*RCL 1;*RCL 2`` was held for approval: the output judged
off after ``*RCL 1``, which need not restore it. A recall after a unit that may replace
every channel's state (a recall, ``*RST``, an unknown header) in the same message is now
refused (-221), like an output enable after one.

Hole 6: the units after a recall were judged on the record as if restored whole: see its
test. Each state they pass through is now judged from every mix the recall may leave.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from bench_gate.snapshots import JUDGED_STATES
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import own_port, served_bench
from tests.core.test_envelope_state import grant_all
from tests.instruments.test_dp832 import LIMITS, PROFILE


@pytest.fixture
def supply_sim() -> Iterator[SimServedThread]:
    with SimServedThread("dp832") as served:
        yield served


@pytest.fixture
def config(sim: SimBenchThread, supply_sim: SimServedThread) -> BenchConfig:
    return served_bench(sim, "dp832", supply_sim, PROFILE, LIMITS)


async def _saved(gw: Gateway, run_id: str, message: str, who: Principal) -> Any:
    req = (await gw.submit(run_id, "dp832", message)).request
    assert req is not None, message
    return (await grant_all(gw, req.id, who)).request


@pytest.mark.parametrize("message", ["*RCL 1;*RCL 2", "*RST;*RCL 2", "*rcl 1;*rcl 2"])
async def test_a_recall_after_another_in_one_message_is_refused(
        gateway: Gateway, script: Principal, olga: Principal,
        supply_sim: SimServedThread, message: str) -> None:
    run = gateway.create_run(script, "script")
    with own_port(supply_sim.resource_name) as panel:
        panel.write(":SOUR2:VOLT 1")
        assert panel.query("*OPC?") == "1"  # taken before the gateway reads
        assert (await _saved(gateway, run.id, "*SAV 1", olga)).status is Status.EXECUTED
        panel.write(":SOUR2:VOLT 20")
        assert panel.query("*OPC?") == "1"
        assert (await _saved(gateway, run.id, "*SAV 2", olga)).status is Status.EXECUTED
        panel.write(":SOUR2:VOLT 1;:OUTP CH2,ON")
        assert panel.query("OUTP? CH2") == "ON"
        alone = await gateway.submit(run.id, "dp832", "*RCL 2")
        assert alone.status == "refused" and alone.code == -222, alone
        result = await gateway.submit(run.id, "dp832", message)
        assert result.status == "refused" and result.code == -221, result
        assert "message of its own" in (result.reason or "")
        assert gateway.list_requests(status=Status.PENDING) == []
        assert panel.query("OUTP? CH2") == "ON" and float(panel.query(":SOUR2:VOLT?")) == 1


async def test_a_unit_after_a_recall_is_judged_on_what_the_recall_may_not_restore(
        gateway: Gateway, script: Principal, olga: Principal,
        supply_sim: SimServedThread) -> None:
    """Hole 6: the units after a recall were judged on the record as if the recall had
    restored every field. CH1 and CH2 tracking, CH2 on at 1 V (envelope 6 V); slot 1
    recorded with tracking off and CH2 off. ``:SOUR1:VOLT 10`` alone is refused (CH2
    follows to 10 V while on); ``*RCL 1;:SOUR1:VOLT 10`` was held, judged with tracking
    off, though the DP832 need not restore it. Each unit after a recall is now judged on
    every mix of the live state and the record the recall may leave."""
    run = gateway.create_run(script, "script")
    with own_port(supply_sim.resource_name) as panel:
        panel.write(":SOUR1:CURR 0.2;:SOUR2:CURR 0.2")
        assert panel.query("*OPC?") == "1"
        assert (await _saved(gateway, run.id, "*SAV 1", olga)).status is Status.EXECUTED
        panel.write(":SOUR1:VOLT 1;:SOUR2:VOLT 1;:OUTP:TRAC CH1,ON;:OUTP CH2,ON")
        assert panel.query("OUTP? CH2") == "ON"
        alone = await gateway.submit(run.id, "dp832", ":SOUR1:VOLT 10")
        assert alone.status == "refused" and alone.code == -222, alone
        result: Any = await gateway.submit(run.id, "dp832", "*RCL 1;:SOUR1:VOLT 10")
        if result.status == "pending":  # every approval: what the supply then does
            result = (await grant_all(gateway, result.request.id, olga)).request
        assert getattr(result, "status", None) == "refused" and result.code == -222, result
        assert "CH2 voltage setpoint is 10.0 V" in (result.reason or ""), result.reason
        assert gateway.list_requests(status=Status.PENDING) == []
        assert float(panel.query(":SOUR2:VOLT?")) == 1


async def test_too_many_units_after_a_recall_to_judge_are_refused_at_once(
        gateway: Gateway, script: Principal, olga: Principal,
        supply_sim: SimServedThread) -> None:
    """32 mixes (three outputs and two tracking switches differ from the record) through
    520 units: more states than JUDGED_STATES, refused (-222) in well under a second of
    judging, never weighed for seconds on the event loop."""
    run = gateway.create_run(script, "script")
    with own_port(supply_sim.resource_name) as panel:
        panel.write(":SOUR1:CURR 0.2;:SOUR2:CURR 0.2;:SOUR3:CURR 0.2")
        assert panel.query("*OPC?") == "1"
        assert (await _saved(gateway, run.id, "*SAV 1", olga)).status is Status.EXECUTED
        panel.write(":OUTP CH1,ON;:OUTP CH2,ON;:OUTP CH3,ON;:OUTP:TRAC CH1,ON;:OUTP:TRAC CH2,ON")
        assert panel.query("OUTP? CH3") == "ON"
    message = "*RCL 1" + ";:SOUR1:VOLT 1" * 520
    assert 32 * 521 > JUDGED_STATES
    started = time.perf_counter()
    result = await gateway.submit(run.id, "dp832", message)
    assert time.perf_counter() - started < 5
    assert result.status == "refused" and result.code == -222, result
    assert "too many units" in (result.reason or "")


async def test_a_header_the_profile_does_not_know_drops_every_stored_state_record(
        gateway: Gateway, script: Principal, olga: Principal,
        supply_sim: SimServedThread) -> None:
    """The DP832's profile is not complete: a header it does not list is held for every
    approval and sent. ``:MEMory:STORe RSF,1`` is one (DP800 guide: it stores the present
    state in location 1, the one ``*SAV 1`` writes); the simulator is made to keep slots
    that way here. The record of slot 1 the gateway kept from ``*SAV 1`` stayed, so with the slot
    rewritten at 20 V on and the bench limit since tightened to 6 V, ``*RCL 1`` was judged
    on the old record (1 V, off) and, with every approval, put CH2 on at 20 V until the
    read-back. A unit whose header the profile does not know now drops every record of the
    instrument before it is sent (as a file deleted does): the recall is refused (-222)."""
    psu = supply_sim.instrument
    perform = psu.perform
    seen: list[tuple[str, str, float]] = []
    # The simulated DP832 keeps no slot's contents: here it keeps CH2's level and output in
    # each location, as the DP800 guide's *SAV, :MEMory:STORe RSF,<n> and *RCL do.
    slots: dict[str, tuple[str, str]] = {}

    def as_the_dp832(canonical: str, query: bool) -> str | None:
        if canonical in ("*SAV 1", "MEM:STOR RSF,1.0"):
            slots["1"] = (str(perform("SOUR2:VOLT?", True)).strip(),
                          str(perform("OUTP? CH2", True)).strip())
        answer = perform(canonical, query)
        if canonical == "*RCL 1" and "1" in slots:
            perform(f"SOUR2:VOLT {slots['1'][0]}", False)
            perform(f"OUTP CH2,{slots['1'][1]}", False)
        if not query:
            seen.append((canonical, str(perform("OUTP? CH2", True)).strip(),
                         float(str(perform("SOUR2:VOLT?", True)))))
        return answer

    psu.perform = as_the_dp832  # type: ignore[method-assign]
    limits = gateway.config.envelope["dp832"]
    six = limits[2]
    limits[2] = six.model_copy(update={"voltage": Decimal(25)})  # a looser bench, at first
    run = gateway.create_run(script, "script")
    with own_port(supply_sim.resource_name) as panel:
        panel.write(":SOUR2:CURR 0.2;:SOUR2:VOLT 1")
        assert panel.query("*OPC?") == "1"
        assert (await _saved(gateway, run.id, "*SAV 1", olga)).status is Status.EXECUTED
        panel.write(":SOUR2:VOLT 20;:OUTP CH2,ON")
        assert panel.query("OUTP? CH2") == "ON"
        stored: Any = await gateway.submit(run.id, "dp832", ":MEM:STOR RSF,1")
        assert stored.status == "pending", stored
        await grant_all(gateway, stored.request.id, olga)
        assert slots["1"] == ("20.0", "ON") or float(slots["1"][0]) == 20, slots
        panel.write(":OUTP CH2,OFF;:SOUR2:VOLT 1")
        assert panel.query("OUTP? CH2") == "OFF"
        limits[2] = six  # the bench limit tightened: 6 V
        seen.clear()
        result: Any = await gateway.submit(run.id, "dp832", "*RCL 1")
        if result.status == "pending":  # every approval: what the supply then does
            result = (await grant_all(gateway, result.request.id, olga)).request
        outside = [s for s in seen if s[1] == "ON" and s[2] > 6]
        assert not outside, f"CH2 on above its 6 V limit: {outside}, {result}"
        assert getattr(result, "status", None) == "refused" and result.code == -222, result
        assert panel.query("OUTP? CH2") == "OFF" and float(panel.query(":SOUR2:VOLT?")) == 1
