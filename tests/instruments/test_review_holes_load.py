"""The second hostile review (tests/core/test_review_holes_2.py), on the electronic load: the
current a DL3021 draws is bounded in every function, not only in CC. Proven on the
simulator, which draws what the DL3000 guide says each function draws."""

from __future__ import annotations

from decimal import Decimal

import pytest

from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from sim_instruments import SimDl3021, SimServedThread
from tests.conftest import own_port
from tests.instruments import test_dl3021

load_sim = test_dl3021.load_sim
config = test_dl3021.config
AMPS = test_dl3021.LIMITS.current  # 10 A


def _drawn(load_sim: SimServedThread) -> float:
    inst = load_sim.instrument
    assert isinstance(inst, SimDl3021)
    return inst.drawn()[1]


async def _grant_everything(gw: Gateway, run_id: str, message: str, who: Principal) -> str:
    """Submit ``message`` and grant every approval it asks for: the most a careless
    approver can do. Returns how it ended (refused, executed...)."""
    result = await gw.submit(run_id, "load", message)
    if result.request is None or result.status != "pending":
        return f"{result.status} {result.code} {result.reason}"
    req = result.request
    done = await gw.grant(req.id, who, [k.value for k in req.missing()],
                          proposal_hash=req.proposal_hash)
    return f"{done.request.status.value} {done.request.outcome}"


@pytest.mark.parametrize(("function", "levels"), [
    ("RES", ":RES 0.08;:RES:ILIM 40"),   # 12 V over 80 mOhm: 150 A, up to its limit
    ("VOLT", ":VOLT 0;:VOLT:ILIM 40"),   # pulls the DUT to 0 V: as much as it may
    ("POW", ":POW 200;:POW:ILIM 40"),    # 200 W from 12 V: 16.7 A
])
async def test_the_load_never_draws_beyond_the_envelope_in_another_function(
        gateway: Gateway, script: Principal, olga: Principal, load_sim: SimServedThread,
        function: str, levels: str) -> None:
    """Every approval granted, at every step: the function, its level and its current
    limit, then the input. The envelope's 10 A bounds what the load draws in CR, CV and CP
    as in CC; on the simulator the input is never on drawing more."""
    run = gateway.create_run(script, "script", goal="discharge the DUT")
    outcomes = [await _grant_everything(gateway, run.id, f":FUNC {function};{levels}", olga),
                await _grant_everything(gateway, run.id, ":INP ON", olga)]
    with own_port(load_sim.resource_name) as panel:
        on = panel.query("INP?") == "1"
        amps = Decimal(panel.query("MEAS:CURR?"))
    assert amps <= AMPS and _drawn(load_sim) <= AMPS, (outcomes, on, amps)
    assert not on or amps <= AMPS


async def test_an_energize_over_a_panel_set_current_limit_of_another_function_is_refused(
        gateway: Gateway, script: Principal, olga: Principal,
        load_sim: SimServedThread) -> None:
    """At the bench: CR at 1 Ohm with a 40 A limit, input off. ``INP ON`` is judged on the
    CR limit too: refused -222 naming it, never held for a click."""
    with own_port(load_sim.resource_name) as panel:
        panel.write(":FUNC RES;:RES 1;:RES:ILIM 40")
        run = gateway.create_run(script, "script")
        result = await gateway.submit(run.id, "load", ":INP ON")
        assert result.status == "refused" and result.code == -222, result
        assert "40.0 A" in (result.reason or "")
        assert panel.query("INP?") == "0"
    assert _drawn(load_sim) == 0.0
    assert not gateway.list_requests(status=Status.PENDING)
