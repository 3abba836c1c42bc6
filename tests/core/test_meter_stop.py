"""An emergency stop makes a meter safe too (bench_gate/meter_safety.py): a meter has no
output, but resistance, continuity, diode, capacitance and RTD temperature drive a test
current into the DUT. The stop leaves the 34465A measuring DC volts (its profile's
``safe_action``), shown by ``FUNC?`` answering a function the excitation spec calls passive;
the hold selects it again when a person picks an exciting function at the panel; a meter
that stays exciting is not shown off. Every check reads the simulator's own port
(``meter_panel``), never the gateway."""

from __future__ import annotations

from typing import Any

import pytest

from bench_gate.gateway import Gateway
from bench_gate.models import EventType, Principal
from sim_instruments import SimBenchThread
from tests.core.test_lists_and_readings import meter_panel
from tests.waits import until

__all__ = ["meter_panel"]

PASSIVE = '"VOLT"'



def enforced(gw: Gateway) -> list[dict[str, Any]]:
    return [e.data for e in gw.journal(f"bench:{gw.bench}", limit=1000)
            if e.type is EventType.STOP_ENFORCED and e.data["instrument"] == "dmm"]


@pytest.mark.parametrize("instrument", [None, "dmm"])
@pytest.mark.parametrize("function", ['"RES"', '"FRES"', '"CAP"', '"CONT"', '"DIOD"'])
async def test_a_stop_leaves_the_meter_measuring_dc_volts(
        gateway: Gateway, olga: Principal, meter_panel: Any, instrument: str | None,
        function: str) -> None:
    """Resistance selected at the panel (a test current into the DUT): the stop aborts and
    selects DC volts, and says what it sent and what FUNC? answered."""
    meter_panel.write(f"FUNC {function}")
    assert meter_panel.query("FUNC?") == function
    done = await gateway.emergency_stop(olga, "test", instrument)
    assert meter_panel.query("FUNC?") == PASSIVE, "the stop left the meter exciting"
    dmm = done["instruments"]["dmm"]
    assert dmm["sent"] == ["ABOR", 'FUNC "VOLT"'] and not dmm["errors"], dmm
    assert dmm["read_back"] == {"FUNC?": PASSIVE}
    assert "not_shown_off" not in gateway.stopped()["dmm"]
    assert meter_panel.query("SYST:ERR?") == '+0,"No error"', "the meter refused a unit"


@pytest.mark.parametrize("selects", [['FUNC "RES"'], ['FUNC "DIOD"'],
                                     ['TEMP:TRAN:TYPE RTD', 'FUNC "TEMP"']])
async def test_an_exciting_function_picked_at_the_panel_under_a_stop_is_undone(
        gateway: Gateway, olga: Principal, meter_panel: Any, selects: list[str]) -> None:
    """The stop holds: each time a person selects an exciting function at the meter's
    panel, the next watch period selects DC volts again, journaled ``stop_enforced``."""
    await gateway.emergency_stop(olga, "test", "dmm")
    for round_ in range(2):  # as long as the stop holds, not only once
        for command in selects:
            meter_panel.write(command)
        assert await until(lambda: meter_panel.query("FUNC?") == PASSIVE), \
            "an exciting function left on under a stop"
        assert await until(lambda r=round_: len(enforced(gateway)) > r)
    found = enforced(gateway)[-1]
    assert found["safe_action"] == ["ABOR", 'FUNC "VOLT"'] and found["error"] is None, found
    assert "may drive the DUT" in found["found"]


async def test_after_the_clear_the_panel_choice_stays(
        gateway: Gateway, olga: Principal, meter_panel: Any) -> None:
    await gateway.emergency_stop(olga, "test", "dmm")
    gateway.clear_stop(olga)
    meter_panel.write('FUNC "RES"')
    checks = gateway.watch.checks
    assert await until(lambda: gateway.watch.checks >= checks + 2)
    assert meter_panel.query("FUNC?") == '"RES"', "a cleared stop still held the meter"


async def test_a_meter_that_stays_exciting_is_not_shown_off_and_is_tried_again(
        sim: SimBenchThread, gateway: Gateway, olga: Principal, meter_panel: Any) -> None:
    """Sent is not done: a meter that ignores the function command (another interface's
    lock, a firmware that refuses it) still answers RES. The stop says so (errors, retry,
    not shown off) and the hold sends the safe action again every period until FUNC?
    answers a passive function; then the stop is journaled proven."""
    real = sim.dmm.perform

    def deaf(canonical: str, query: bool) -> str | None:
        if not query and canonical.startswith("FUNC "):
            return None  # ignored, as a meter that refuses it
        return real(canonical, query)

    meter_panel.write('FUNC "RES"')
    assert meter_panel.query("FUNC?") == '"RES"'  # taken before the meter turns deaf
    sim.dmm.perform = deaf  # type: ignore[method-assign]
    try:
        done = await gateway.emergency_stop(olga, "test", "dmm")
        dmm = done["instruments"]["dmm"]
        assert dmm["errors"] and "retry" in dmm, dmm
        assert "a DC test current" in dmm["errors"][-1]
        assert "not_shown_off" in gateway.stopped()["dmm"]
        assert meter_panel.query("FUNC?") == '"RES"'
    finally:
        sim.dmm.perform = real  # type: ignore[method-assign]
    assert await until(lambda: meter_panel.query("FUNC?") == PASSIVE)
    assert await until(lambda: "not_shown_off" not in gateway.stopped()["dmm"])
    proven = [e["proven"] for e in enforced(gateway) if "proven" in e]
    assert proven and proven[-1].startswith("it measures in a passive function"), proven
