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
from bench_gate.gateway import Gateway
from bench_gate.models import Approval, ApprovalKind, Principal, Role, Status


@pytest.fixture
def strict(gateway: Gateway) -> Gateway:
    gateway.config.policy.two_person_output_enable = True
    return gateway


def on(front_panel: Any, ch: int) -> bool:
    return int(str(front_panel.query(f"OUTP? (@{ch})")).strip()) == 1


async def test_setpoint_from_an_earlier_request_binds_the_later_output_enable(
        strict: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any) -> None:
    run = strict.create_run(script, "script")
    volt = (await strict.submit(run.id, "psu", "VOLT 5,(@1)")).request
    assert volt is not None
    done = await strict.grant(volt.id, olga, ["setpoint"], proposal_hash=volt.proposal_hash)
    assert done.request.status is Status.EXECUTED
    enable = (await strict.submit(run.id, "psu", "OUTP ON,(@1)")).request
    assert enable is not None and enable.required == [ApprovalKind.OUTPUT_ENABLE]
    with pytest.raises(PermissionDenied, match="olga approved the setpoint in force on CH1"):
        await strict.grant(enable.id, olga, ["output_enable"], proposal_hash=enable.proposal_hash)
    assert not on(front_panel, 1)
    final = await strict.grant(enable.id, pete, ["output_enable"],
                               proposal_hash=enable.proposal_hash)
    assert final.request.status is Status.EXECUTED and on(front_panel, 1)


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
    enable = (await strict.submit(run.id, "psu", "OUTP ON,(@1)")).request
    assert enable is not None
    with pytest.raises(PermissionDenied, match="second person"):
        await strict.grant(enable.id, olga, ["output_enable"], proposal_hash=enable.proposal_hash)
    assert not on(front_panel, 1)
    final = await strict.grant(enable.id, pete, ["output_enable"],
                               proposal_hash=enable.proposal_hash)
    assert final.request.status is Status.EXECUTED and on(front_panel, 1)


async def test_identities_compare_normalized(strict: Gateway, script: Principal,
                                            olga: Principal, front_panel: Any) -> None:
    run = strict.create_run(script, "script")
    req = (await strict.submit(run.id, "psu", "VOLT 1,(@1);:OUTP ON,(@1)")).request
    assert req is not None
    await strict.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    for alias in ("Olga", "olga ", "OLGA", "ｏｌｇａ"):
        with pytest.raises(PermissionDenied, match="second person"):
            await strict.grant(req.id, Principal(name=alias, role=Role.OPERATOR),
                               ["output_enable"], proposal_hash=req.proposal_hash)
    assert not on(front_panel, 1)


async def test_a_requester_spelled_differently_is_still_the_requester(
        gateway: Gateway, olga: Principal) -> None:
    bot = Principal(name="bot-7", role=Role.REQUESTER)
    run = gateway.create_run(bot, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 1,(@1)")).request
    assert req is not None
    twin = Principal(name="BOT-7 ", role=Role.OPERATOR)
    with pytest.raises(PermissionDenied, match="made this request"):
        await gateway.grant(req.id, twin, ["setpoint"], proposal_hash=req.proposal_hash)


async def test_the_owner_refuses_at_execution_what_its_rules_forbid(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    """Approvals recorded under looser rules (another gateway's, or before a config change)
    are checked again by the owner just before it executes."""
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 1,(@1);:OUTP ON,(@1)")).request
    assert req is not None
    await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
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
