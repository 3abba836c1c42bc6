"""Two people are two people for the change, not for the request.

With ``two_person_output_enable``, whoever enables an output differs from whoever approved
the setpoint in force on that channel, whether it came from this request, an earlier one,
an edit or a plan. Identities compare normalized (``Olga`` and ``olga `` are one person).
Each case checks the output on the simulator's own port.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench_gate.errors import PermissionDenied
from bench_gate.gateway import Gateway, GrantResult
from bench_gate.models import Approval, ApprovalKind, Principal, Role, Status, TakeoverRequest


@pytest.fixture
def strict(gateway: Gateway) -> Gateway:
    gateway.config.policy.two_person_output_enable = True
    return gateway


def on(front_panel: Any, ch: int) -> bool:
    return int(str(front_panel.query(f"OUTP? (@{ch})")).strip()) == 1


async def held(gw: Gateway, run: str, message: str) -> TakeoverRequest:
    """``message`` sent to the PSU and held for a person: its request."""
    req = (await gw.submit(run, "psu", message)).request
    assert req is not None, f"{message!r} was not held"
    return req


async def give(gw: Gateway, req: TakeoverRequest, who: Principal, *kinds: str) -> GrantResult:
    """``who`` gives ``kinds`` on the proposal ``req`` was shown with."""
    return await gw.grant(req.id, who, list(kinds), proposal_hash=req.proposal_hash)


async def refused(gw: Gateway, req: TakeoverRequest, who: Principal, match: str,
                  *kinds: str) -> None:
    with pytest.raises(PermissionDenied, match=match):
        await give(gw, req, who, *kinds)


async def executed(gw: Gateway, req: TakeoverRequest, who: Principal, *kinds: str) -> None:
    done = await give(gw, req, who, *kinds)
    assert done.request.status is Status.EXECUTED, done.message


async def test_setpoint_from_an_earlier_request_binds_the_later_output_enable(
        strict: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any) -> None:
    run = strict.create_run(script, "script")
    await executed(strict, await held(strict, run.id, "VOLT 5,(@1)"), olga, "setpoint")
    enable = await held(strict, run.id, "OUTP ON,(@1)")
    assert enable.required == [ApprovalKind.OUTPUT_ENABLE]
    await refused(strict, enable, olga, "olga approved the setpoint in force on CH1",
                  "output_enable")
    assert not on(front_panel, 1)
    await executed(strict, enable, pete, "output_enable")
    assert on(front_panel, 1)


async def test_a_plan_approved_by_one_person_does_not_let_them_enable_alone(
        strict: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any) -> None:
    run = strict.create_run(script, "script")
    plan = await strict.request_plan(run.id, {
        "instrument": "psu", "channels": [1], "voltage": [0, 5], "current_max": 1,
        "output_enable": False, "max_writes": 5})
    await strict.grant(plan.id, olga, ["setpoint"], proposal_hash=plan.proposal_hash)
    step = await strict.submit(run.id, "psu", "VOLT 2,(@1)")
    assert step.status == "executed", step.reason
    enable = await held(strict, run.id, "OUTP ON,(@1)")
    await refused(strict, enable, olga, "second person", "output_enable")
    assert not on(front_panel, 1)
    await executed(strict, enable, pete, "output_enable")
    assert on(front_panel, 1)


async def test_identities_compare_normalized(strict: Gateway, script: Principal,
                                            olga: Principal, front_panel: Any) -> None:
    run = strict.create_run(script, "script")
    req = await held(strict, run.id, "VOLT 1,(@1);:OUTP ON,(@1)")
    await give(strict, req, olga, "setpoint")
    for alias in ("Olga", "olga ", "OLGA", "ｏｌｇａ"):
        await refused(strict, req, Principal(name=alias, role=Role.OPERATOR), "second person",
                      "output_enable")
    assert not on(front_panel, 1)


async def test_a_requester_spelled_differently_is_still_the_requester(
        gateway: Gateway, olga: Principal) -> None:
    bot = Principal(name="bot-7", role=Role.REQUESTER)
    run = gateway.create_run(bot, "script")
    req = await held(gateway, run.id, "VOLT 1,(@1)")
    twin = Principal(name="BOT-7 ", role=Role.OPERATOR)
    await refused(gateway, req, twin, "made this request", "setpoint")


async def test_the_owner_refuses_at_execution_what_its_rules_forbid(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    """Approvals recorded under looser rules (another gateway's, or before a config change)
    are checked again by the owner just before it executes."""
    run = gateway.create_run(script, "script")
    req = await held(gateway, run.id, "VOLT 1,(@1);:OUTP ON,(@1)")
    await give(gateway, req, olga, "setpoint")
    gateway.config.policy.two_person_output_enable = True  # tightened while it waits
    stored = gateway.store.get_request(req.id)
    assert stored is not None
    # As if another gateway (rule off) had recorded the second half by the same person.
    stored.approvals.append(Approval(kind=ApprovalKind.OUTPUT_ENABLE, by="olga",
                                     proposal_hash=stored.proposal_hash))
    stored.status = Status.APPROVED
    assert gateway.store.save_request(stored, stored.version, [])
    final = await gateway.wait(req.id, timeout=10, follow=False)  # the owner's sweep runs it
    assert final.status is Status.FAILED
    assert "this bench's rules refuse it now" in (final.outcome or "")
    assert not on(front_panel, 1)


async def test_one_person_cannot_give_every_approval_of_an_unpredictable_command(
        strict: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any) -> None:
    for command in ("VOLT 5,(@1)", "CURR 0.5,(@1)", "OUTP 1,(@1)"):
        front_panel.write(command)
    run = strict.create_run(script, "script")
    save = await held(strict, run.id, "*SAV 3")  # recorded: a recall of it is judged
    await give(strict, save, olga, "setpoint", "state")
    await give(strict, save, pete, "output_enable")
    front_panel.write("*RST")
    req = await held(strict, run.id, "*RCL 3")
    await refused(strict, req, olga, "second person", "setpoint", "output_enable", "state")
    await give(strict, req, olga, "setpoint", "state")
    await refused(strict, req, olga, "second person", "output_enable")
    assert not on(front_panel, 1)
    await executed(strict, req, pete, "output_enable")
    assert on(front_panel, 1)


async def test_one_person_cannot_approve_a_plan_that_includes_output_enable(
        strict: Gateway, script: Principal, olga: Principal) -> None:
    run = strict.create_run(script, "script")
    plan = await strict.request_plan(run.id, {
        "instrument": "psu", "channels": [1], "voltage": [0, 5], "current_max": 0.5,
        "output_enable": True, "max_writes": 5})
    with pytest.raises(PermissionDenied, match="second person"):
        await strict.grant(plan.id, olga, ["setpoint", "output_enable"],
                           proposal_hash=plan.proposal_hash)


async def test_everyone_behind_the_setpoint_in_force_counts(
        strict: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any) -> None:
    """olga approved the voltage, pete the current limit: neither may switch it on."""
    ann = Principal(name="ann", role=Role.OPERATOR)
    run = strict.create_run(script, "script")
    for message, who in (("VOLT 5,(@1)", olga), ("CURR 0.9,(@1)", pete)):
        await executed(strict, await held(strict, run.id, message), who, "setpoint")
    enable = await held(strict, run.id, "OUTP ON,(@1)")
    for who in (olga, pete):
        await refused(strict, enable, who, "setpoint in force on CH1", "output_enable")
    assert not on(front_panel, 1)
    await executed(strict, enable, ann, "output_enable")
    assert on(front_panel, 1)


async def test_a_setpoint_on_another_channel_does_not_launder_the_one_in_force(
        strict: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any) -> None:
    run = strict.create_run(script, "script")
    first = await held(strict, run.id, "VOLT 5,(@1);:CURR 0.5,(@1)")
    await give(strict, first, olga, "setpoint")
    mixed = await held(strict, run.id, "VOLT 1,(@2);:OUTP ON,(@1)")
    await give(strict, mixed, pete, "setpoint")
    await refused(strict, mixed, olga, "setpoint in force on CH1", "output_enable")
    assert not on(front_panel, 1)
