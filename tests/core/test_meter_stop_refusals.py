"""Under an emergency stop, a meter reading that would excite is refused at once (-203),
never held for a person nor sent: the meter's function is asked on the reading's own lane
turn, and one a person selected at the panel (before the hold selects DC volts again) makes
the reading ``excites``, which a stopped instrument does not take. Read on the simulator's
own port (``meter_panel``)."""

from __future__ import annotations

from typing import Any

import pytest

from bench_gate import Outcome
from bench_gate.config import BenchConfig, default_config
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from sim_instruments import SimBenchThread
from tests.core.test_lists_and_readings import meter_panel

__all__ = ["meter_panel"]


@pytest.fixture
def config(sim: SimBenchThread) -> BenchConfig:
    """The hold looks once an hour: what the panel sets stays for the test to read."""
    cfg = default_config(sim.psu_port, sim.dmm_port)
    cfg.policy.watch_seconds = 3600
    return cfg


@pytest.mark.parametrize("message", ["READ?", "INIT", "*TRG", "CONF:RES", 'FUNC "CAP"'])
async def test_a_reading_that_would_excite_is_refused_under_a_stop(
        gateway: Gateway, olga: Principal, script: Principal, meter_panel: Any,
        message: str) -> None:
    """Under a stop, a reading made while an exciting function is selected at the panel
    (before the hold looks again) is refused at once, -203, never held for a person nor
    sent; a reading in DC volts passes."""
    await gateway.emergency_stop(olga, "test", "dmm")
    run = gateway.create_run(script, "script")
    passes = await gateway.submit(run.id, "dmm", "READ?")
    assert passes.status is Outcome.EXECUTED, passes
    meter_panel.write('FUNC "RES"')
    result = await gateway.submit(run.id, "dmm", message)
    assert result.status is Outcome.REFUSED and result.code == -203, result
    assert "stopped" in (result.reason or "")
    assert not gateway.list_requests()
    assert meter_panel.query("FUNC?") == '"RES"'
