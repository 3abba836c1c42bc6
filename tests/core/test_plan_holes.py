"""Holes of standing plans found by the attack review (docs/plans.md), each proved on the
simulated bench."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bench_gate.config import BenchConfig
from bench_gate.errors import InvalidInput, TransitionError
from bench_gate.gateway import Gateway
from bench_gate.instruments import PyvisaLink
from bench_gate.models import EventType, Principal, Status
from bench_gate.plans import PlanStatus
from bench_gate.store import SqliteStore
from tests.conftest import Clock
from tests.core.test_plans import SWEEP_SCOPE, active_plan, journal
from tests.faults import Fault, FaultLink


@pytest.mark.parametrize("channels", [[1, 1], [1, 2, 1], [2] * 40])
async def test_a_scope_names_each_channel_once(gateway: Gateway, script: Principal,
                                               channels: list[int]) -> None:
    """``(@1,1,1,...)`` was a scope whose words a person reads as "psu CH1, CH1, CH1, ..."
    (thousands of times over the socket door's 8192 characters): a plan's scope is a few
    short lines, so a channel named twice is refused, naming the field."""
    run = gateway.create_run(script, "script")
    with pytest.raises(InvalidInput) as refused:
        await gateway.request_plan(run.id, {**SWEEP_SCOPE, "channels": channels})
    assert refused.value.field == "channels"
    assert "more than once" in refused.value.message
    assert gateway.list_plans(run.id) == []
    assert gateway.list_requests(status=Status.PENDING) == []


async def test_an_emergency_stop_ends_the_standing_plans_on_what_it_stopped(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any) -> None:
    """Someone pressed STOP because something looked wrong. It cancelled every approved
    request and suspended the runs that had one, but a run's live plan (an approval in
    force, like an approved request) stayed active: once the stop was cleared, the plan
    switched CH1 back on without a click. A stop now ends every plan on the instruments it
    stopped, and suspends their runs, as it does the runs whose requests it cancelled."""
    run = gateway.create_run(script, "script", goal="sweep")
    plan_id = await active_plan(gateway, run.id, olga, pete)
    for message in ("CURR 0.5,(@1)", "VOLT 0.5,(@1)", "OUTP ON,(@1)"):
        assert (await gateway.submit(run.id, "psu", message)).status == "executed", message
    assert front_panel.query("OUTP? (@1)").strip() == "1"

    stopped = await gateway.emergency_stop(olga, "test")
    assert front_panel.query("OUTP? (@1)").strip() == "0"
    assert run.id in stopped["suspended"]
    plan = gateway.get_plan(plan_id)
    assert plan.status is PlanStatus.REVOKED
    assert plan.revoked_by is not None and "emergency stop" in plan.revoked_by
    assert any(e.get("plan_id") == plan_id
               for e in journal(gateway, run.id, EventType.PLAN_REVOKED))

    gateway.clear_stop(olga)
    again = await gateway.submit(run.id, "psu", "OUTP ON,(@1)")
    assert again.status == "refused" and "suspended" in (again.reason or "")
    gateway.release(run.id, pete)
    again = await gateway.submit(run.id, "psu", "OUTP ON,(@1)")
    assert again.status == "pending", again.reason  # a person decides: no plan covers it
    assert front_panel.query("OUTP? (@1)").strip() == "0"


async def test_a_stop_of_one_instrument_leaves_plans_elsewhere(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal) -> None:
    """Only the plans on the instruments stopped end: STOP on the meter ends no plan of
    the supply."""
    run = gateway.create_run(script, "script", goal="sweep")
    plan_id = await active_plan(gateway, run.id, olga, pete)
    await gateway.emergency_stop(olga, "test", "dmm")
    assert gateway.get_plan(plan_id).status is PlanStatus.ACTIVE
    assert (await gateway.submit(run.id, "psu", "VOLT 0.5,(@1)")).status == "executed"


async def test_a_step_a_person_must_check_ends_its_plan(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, pete: Principal, front_panel: Any) -> None:
    """A plan step the instrument answered with an error is ``ambiguous``: "a person must
    check the instrument". The plan went on regardless, and the run's next step ran
    without anyone having looked. A step that ends failed or ambiguous now ends its plan:
    what follows waits for a person."""
    psu = config.instrument("psu")
    assert psu is not None
    link = FaultLink(PyvisaLink(psu), "psu")
    gw = Gateway(config, SqliteStore(db_path), links={"psu": link}, clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script", goal="sweep")
        plan_id = await active_plan(gw, run.id, olga, pete)
        link.arm(Fault.INSTRUMENT_ERROR, match="VOLT 0.5")
        step = await gw.submit(run.id, "psu", "VOLT 0.5,(@1)")
        assert step.request is not None and step.request.status is Status.AMBIGUOUS
        plan = gw.get_plan(plan_id)
        assert plan.status is PlanStatus.REVOKED, plan
        assert plan.revoked_by is not None and step.request.id in plan.revoked_by
        after = await gw.submit(run.id, "psu", "VOLT 1,(@1)")
        assert after.status == "pending", after.reason
        assert Decimal(front_panel.query("VOLT? (@1)")) == Decimal("0.5")
    finally:
        await gw.close()
        gw.store.close()


async def test_a_breach_the_gateway_made_safe_ends_the_plans_over_it(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any) -> None:
    """CH1 on inside its plan; someone at the panel puts its current limit at 1.5 A
    (envelope 1 A); the envelope watch switches it off. Back at 0.5 A, the plan switched
    it on again without a
    click, though nobody had looked at why the bench needed the safe action. The plans
    over a channel the gateway made safe now end; a person decides what comes next."""
    run = gateway.create_run(script, "script", goal="sweep")
    plan_id = await active_plan(gateway, run.id, olga, pete)
    for message in ("CURR 0.5,(@1)", "VOLT 0.5,(@1)", "OUTP ON,(@1)"):
        assert (await gateway.submit(run.id, "psu", message)).status == "executed", message
    other = gateway.create_run(script, "script", goal="CH2")  # a plan over CH2 only
    other_plan = await active_plan(gateway, other.id, olga, pete, {
        **SWEEP_SCOPE, "channels": [2]})
    front_panel.write("CURR 1.5,(@1)")
    for _ in range(300):  # the watch looks every policy.watch_seconds
        if front_panel.query("OUTP? (@1)").strip() == "0":
            break
        await asyncio.sleep(0.05)
    assert front_panel.query("OUTP? (@1)").strip() == "0"
    front_panel.write("CURR 0.5,(@1)")
    # The plans end on the safe action's lane turn, after its read-back and sync point,
    # a moment after the output went off on the panel.
    for _ in range(100):
        if gateway.get_plan(plan_id).status is not PlanStatus.ACTIVE:
            break
        await asyncio.sleep(0.05)
    plan = gateway.get_plan(plan_id)
    assert plan.status is PlanStatus.REVOKED, plan
    assert plan.revoked_by is not None and "made safe" in plan.revoked_by
    assert gateway.get_plan(other_plan).status is PlanStatus.ACTIVE
    again = await gateway.submit(run.id, "psu", "OUTP ON,(@1)")
    assert again.status == "pending", again.reason
    assert front_panel.query("OUTP? (@1)").strip() == "0"


async def test_a_lost_clients_outputs_switched_off_end_the_plans_over_them(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any) -> None:
    """CH1 on inside its plan; the client goes silent past ``lease_seconds`` and the
    gateway switches CH1 off (``on_client_lost = "safe"``): someone may now be at the DUT.
    The client came back and its plan switched CH1 on again without a click. A lost
    lease's safe action now ends the plans over those channels, as a breach's does."""
    gateway.config.policy.lease_seconds = 1.0
    gateway.config.policy.on_client_lost = "safe"
    run = gateway.create_run(script, "script", goal="sweep")
    plan_id = await active_plan(gateway, run.id, olga, pete)
    for message in ("CURR 0.5,(@1)", "VOLT 0.5,(@1)", "OUTP ON,(@1)"):
        assert (await gateway.submit(run.id, "psu", message)).status == "executed", message
    assert front_panel.query("OUTP? (@1)").strip() == "1"
    for _ in range(100):  # the sweeper looks every 0.5 s
        if front_panel.query("OUTP? (@1)").strip() == "0" and not gateway.leases():
            break
        await asyncio.sleep(0.05)
    assert front_panel.query("OUTP? (@1)").strip() == "0"
    plan = gateway.get_plan(plan_id)
    assert plan.status is PlanStatus.REVOKED, plan
    assert plan.revoked_by is not None and "lease" in plan.revoked_by
    back = await gateway.submit(run.id, "psu", "OUTP ON,(@1)")  # the client is back
    assert back.status == "pending", back.reason
    assert front_panel.query("OUTP? (@1)").strip() == "0"


async def test_a_pending_plan_the_safe_action_ends_takes_its_request_with_it(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any) -> None:
    """A plan over CH1 asked for, not yet approved; the envelope watch switches CH1 off (a
    breach set at the panel) and ends the plan. Its request stayed pending: the two
    approvals given after it moved it to ``executing`` and then failed to activate the
    ended plan (TransitionError), leaving a request executing forever (a restart then
    reconciled it as a write). Ending a pending plan any way cancels its request, as an
    operator's revoke does: nothing is left to approve, nothing activates."""
    run = gateway.create_run(script, "script", goal="sweep")
    req = await gateway.request_plan(run.id, SWEEP_SCOPE, rationale="IV sweep of CH1")
    assert req.plan_id is not None
    front_panel.write("CURR 1.5,(@1);:VOLT 1,(@1);:OUTP ON,(@1)")
    for _ in range(300):  # the watch looks every policy.watch_seconds
        if front_panel.query("OUTP? (@1)").strip() == "0":
            break
        await asyncio.sleep(0.05)
    assert front_panel.query("OUTP? (@1)").strip() == "0"
    front_panel.write("CURR 0.5,(@1)")
    # The plan ends on the safe action's lane turn, a moment after the output went off.
    for _ in range(100):
        if gateway.get_plan(req.plan_id).status is not PlanStatus.PENDING:
            break
        await asyncio.sleep(0.05)
    assert gateway.get_plan(req.plan_id).status is PlanStatus.REVOKED
    assert gateway.get_request(req.id).status is Status.CANCELLED
    for who, kind in ((olga, "setpoint"), (pete, "output_enable")):
        with pytest.raises(TransitionError):
            await gateway.grant(req.id, who, [kind], proposal_hash=req.proposal_hash)
    assert gateway.get_request(req.id).status is Status.CANCELLED
    assert gateway.get_plan(req.plan_id).status is PlanStatus.REVOKED
    again = await gateway.submit(run.id, "psu", "OUTP ON,(@1)")
    assert again.status == "pending", again.reason
    assert front_panel.query("OUTP? (@1)").strip() == "0"


async def test_a_plan_ended_by_its_runs_close_is_journaled(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any) -> None:
    """A run closed (its client gone) ends its standing plan: the end is journaled
    (plan_revoked) as any plan's end is; before, the plan was only saved revoked, with
    nothing in the journal to say when or why. A pending plan ends with its request, which
    the close cancels (journaled as that)."""
    run = gateway.create_run(script, "script", goal="sweep")
    active = await active_plan(gateway, run.id, olga, pete)
    req = await gateway.request_plan(run.id, {**SWEEP_SCOPE, "channels": [2]})
    gateway.close_run(run.id, "the requester disconnected")
    plan = gateway.get_plan(active)
    assert plan.status is PlanStatus.REVOKED and plan.revoked_by == "the run was closed"
    ended = journal(gateway, run.id, EventType.PLAN_REVOKED)
    assert [(e["plan_id"], e["by"]) for e in ended] == [(active, "the run was closed")], ended
    assert req.plan_id is not None
    assert gateway.get_plan(req.plan_id).status in (PlanStatus.DENIED, PlanStatus.REVOKED)
    assert gateway.get_request(req.id).status is Status.CANCELLED
    assert front_panel.query("OUTP? (@1)").strip() == "0"
