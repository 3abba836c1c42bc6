"""Attacks on "an approval lasts only as long as its token" (docs/takeover.md), each one a
way a revoked token's approval still reached the instrument, or still counted in what people
are shown. Each proves the instrument on the simulator's own port."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from bench_gate.errors import StoreError
from bench_gate.gateway import Gateway
from bench_gate.models import ApprovalKind, Principal, Status

from .test_revoked_approvals import operator, output_on, revoke


async def until(check: Callable[[], Any], seconds: float = 5.0) -> Any:
    deadline = time.monotonic() + seconds
    while not (found := check()):
        assert time.monotonic() < deadline, "gave up waiting"
        await asyncio.sleep(0.02)
    return found


async def test_a_token_revoked_while_its_approved_write_waits_for_the_lane_writes_nothing(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    """The last approval commits the request ``executing`` while the lane is busy (a slow
    reading, a safe action elsewhere); the first approver's token is revoked meanwhile.
    The checks before the lane turn had passed, and the lane turn's own recheck did not
    look at tokens: the write energized CH1 on a revoked approval."""
    olga, oscar = operator(gateway, "olga"), operator(gateway, "oscar")
    run = gateway.create_run(script, "script")
    before = Decimal(front_panel.query("VOLT? (@1)"))
    req = (await gateway.submit(run.id, "psu", "VOLT 2.5,(@1);:OUTP ON,(@1)")).request
    assert req is not None
    await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    lane = gateway.instruments["psu"].lane
    holding = asyncio.ensure_future(lane.run(lambda link: asyncio.sleep(1.0)))
    await asyncio.sleep(0.1)
    granting = asyncio.ensure_future(gateway.grant(req.id, oscar, ["output_enable"],
                                                   proposal_hash=req.proposal_hash))
    await until(lambda: gateway.get_request(req.id).status is Status.EXECUTING)
    revoke(gateway, "olga")
    await holding
    final = (await granting).request
    assert final.status is Status.FAILED, (final.status, final.outcome)
    assert "the setpoint approval by olga no longer counts" in (final.outcome or "")
    assert Decimal(front_panel.query("VOLT? (@1)")) == before and not output_on(front_panel)


def _errors(client: Any) -> list[str]:
    out = []
    while (err := client.query("SYST:ERR?")) != '+0,"No error"':
        out.append(err)
    return out


async def test_an_approval_waiting_for_a_resend_stops_showing_approved_once_revoked(
        open_client: Callable[..., Any], gateway: Gateway, front_panel: Any) -> None:
    """Through the socket door with ``GATE:HOLD REFUSE``: the write is approved and waits
    for its requester's resend; the approver's token is revoked on the store. What the
    script and the console were shown said ``approved`` until the resend came (if ever):
    the sweep now ends it, failed, nothing written, and the resend runs nothing."""
    from tests.doors.proxy.test_proxy import in_thread, next_pending
    olga = operator(gateway, "olga")
    psu = open_client(timeout=3000)

    def hold() -> list[str]:
        psu.write("GATE:HOLD REFUSE")
        psu.write("VOLT 1.5,(@1)")
        return _errors(psu)

    await in_thread(hold)
    req = await next_pending(gateway)
    granted = await gateway.grant(req.id, olga, list(req.required),
                                  proposal_hash=req.proposal_hash)
    assert granted.request.status is Status.APPROVED
    revoke(gateway, "olga")
    await until(lambda: gateway.get_request(req.id).status is not Status.APPROVED, 3)
    final = gateway.get_request(req.id)
    assert final.status is Status.FAILED, final.outcome
    assert "the setpoint approval by olga no longer counts" in (final.outcome or "")
    status = await in_thread(psu.query, "GATE:STAT?")
    assert not status.startswith("APPROVED"), status

    def resend() -> list[str]:
        psu.write("VOLT 1.5,(@1)")
        return _errors(psu)

    await in_thread(resend)
    assert Decimal(front_panel.query("VOLT? (@1)")) == 0
    assert gateway.get_request(req.id).status is Status.FAILED


async def _current_by(gateway: Gateway, script: Principal, who: Principal) -> str:
    """CH1's setpoint (2 V, 0.1 A) approved and put in force by ``who``; a run asking to
    set 3 V and switch CH1 on, which stands on ``who``'s current limit (its cover)."""
    run = gateway.create_run(script, "script")
    set_ = (await gateway.submit(run.id, "psu", "VOLT 2,(@1);:CURR 0.1,(@1)")).request
    assert set_ is not None
    done = await gateway.grant(set_.id, who, ["setpoint"], proposal_hash=set_.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.request.outcome
    on = (await gateway.submit(run.id, "psu", "VOLT 3,(@1);:OUTP ON,(@1)")).request
    assert on is not None and on.handoff.get("setpoint_cover"), on.handoff
    return on.id


async def test_a_current_limit_approved_with_a_revoked_token_never_stands_under_an_output_enable(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    """The request sets the voltage itself and stands on olga's current limit in force.
    oscar approves its setpoint (the voltage: shown the current as olga's), olga's token is
    revoked, ida approves the output enable: it energized CH1 on a current limit nobody
    whose token stands approved, and remembered it as oscar's. Now it goes back for review
    with a fresh request that asks for the setpoint, the current shown as it is now."""
    olga, oscar, ida = (operator(gateway, n) for n in ("olga", "oscar", "ida"))
    tk = await _current_by(gateway, script, olga)
    on = gateway.get_request(tk)
    await gateway.grant(tk, oscar, ["setpoint"], proposal_hash=on.proposal_hash)
    revoke(gateway, "olga")
    after = await gateway.grant(tk, ida, ["output_enable"], proposal_hash=on.proposal_hash)
    assert after.request.status is Status.STALE, after.request.outcome
    assert after.request.superseded_by is not None
    fresh = gateway.get_request(after.request.superseded_by)
    assert fresh.missing() == [ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE]
    assert fresh.handoff["setpoint_needed"] == [{"channel": 1, "current": "0.1"}]
    assert "setpoint_cover" not in fresh.handoff
    assert not output_on(front_panel) and Decimal(front_panel.query("VOLT? (@1)")) == 2
    await gateway.grant(fresh.id, oscar, ["setpoint"], proposal_hash=fresh.proposal_hash)
    final = await gateway.grant(fresh.id, ida, ["output_enable"],
                                proposal_hash=fresh.proposal_hash)
    assert final.request.status is Status.EXECUTED, final.request.outcome
    assert output_on(front_panel)


async def test_a_cover_revoked_while_its_output_enable_waits_for_the_lane_writes_nothing(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    """All approved before the revocation; the write waits for the lane meanwhile. The lane
    turn looked at the request's own approvals only, not at the setpoint in force it stood
    on (its own setpoint approval covered the voltage only)."""
    olga, oscar, ida = (operator(gateway, n) for n in ("olga", "oscar", "ida"))
    tk = await _current_by(gateway, script, olga)
    on = gateway.get_request(tk)
    await gateway.grant(tk, oscar, ["setpoint"], proposal_hash=on.proposal_hash)
    lane = gateway.instruments["psu"].lane
    holding = asyncio.ensure_future(lane.run(lambda link: asyncio.sleep(1.0)))
    await asyncio.sleep(0.1)
    granting = asyncio.ensure_future(gateway.grant(tk, ida, ["output_enable"],
                                                   proposal_hash=on.proposal_hash))
    await until(lambda: gateway.get_request(tk).status is Status.EXECUTING)
    revoke(gateway, "olga")
    await holding
    final = (await granting).request
    assert final.status in (Status.FAILED, Status.STALE), (final.status, final.outcome)
    assert not output_on(front_panel) and Decimal(front_panel.query("VOLT? (@1)")) == 2


async def test_a_pending_output_enable_stops_showing_a_revoked_cover_within_the_sweep(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    """Nobody decides after the revocation: what people were shown still named olga's
    current limit as the approved setpoint it stands on, and asked for no setpoint. The
    sweep sends it back for review with a fresh request that asks for one."""
    olga = operator(gateway, "olga")
    tk = await _current_by(gateway, script, olga)
    revoke(gateway, "olga")
    stale = await until(lambda: (r := gateway.get_request(tk)).superseded_by and r, 3)
    assert stale.status is Status.STALE
    assert "approved_setpoint" in (stale.outcome or ""), stale.outcome
    assert stale.superseded_by is not None
    fresh = gateway.get_request(stale.superseded_by)
    assert fresh.status is Status.PENDING
    assert fresh.missing() == [ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE]
    assert "setpoint_cover" not in fresh.handoff and fresh.handoff["setpoint_needed"]
    assert not output_on(front_panel)


async def test_a_setpoint_remembered_before_setpoints_kept_tokens_dies_with_its_token(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    """A setpoint in force lasts indefinitely: one remembered before the upgrade that made
    setpoints keep their tokens (no ``tokens_field``) went on covering output enables after
    its approver's token was revoked. It stands on the token its approver held then."""
    olga, oscar = operator(gateway, "olga"), operator(gateway, "oscar")
    run = gateway.create_run(script, "script")
    set_ = (await gateway.submit(run.id, "psu", "VOLT 2,(@1);:CURR 0.1,(@1)")).request
    assert set_ is not None
    await gateway.grant(set_.id, olga, ["setpoint"], proposal_hash=set_.proposal_hash)
    key = f"{gateway.bench}/psu"
    kept = gateway.store.get_setpoint(key, 1)
    assert kept is not None and kept.pop("tokens_field")  # as an older gateway kept it
    gateway.store.put_setpoint(key, 1, kept)
    on = (await gateway.submit(run.id, "psu", "OUTP ON,(@1)")).request
    assert on is not None and on.required == [ApprovalKind.OUTPUT_ENABLE]
    revoke(gateway, "olga")
    after = await gateway.grant(on.id, oscar, ["output_enable"], proposal_hash=on.proposal_hash)
    assert after.request.status is Status.STALE, after.request.outcome
    assert after.request.superseded_by is not None
    fresh = gateway.get_request(after.request.superseded_by)
    assert set(fresh.required) == {ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE}
    assert not output_on(front_panel)


async def test_a_revocation_the_sweep_could_not_finish_is_taken_up_at_the_next_sweep(
        gateway: Gateway, script: Principal, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store failed once while the sweep read the requests (a PostgreSQL failover):
    the revocation was marked seen first, so its approvals stayed shown until someone
    granted again."""
    olga = operator(gateway, "olga")
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 2.5,(@1);:OUTP ON,(@1)")).request
    assert req is not None
    await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    real = gateway.store.list_requests
    failed: list[bool] = []

    def once(*args: Any, **kwargs: Any) -> Any:
        if not failed and kwargs.get("status") is Status.PENDING and "run_id" not in kwargs:
            failed.append(True)  # the sweep's look at every pending request
            raise StoreError("the store is away")
        return real(*args, **kwargs)

    monkeypatch.setattr(gateway.store, "list_requests", once)
    revoke(gateway, "olga")
    await until(lambda: failed, 3)
    await until(lambda: gateway.get_request(req.id).approvals == [], 3)


def _as_kept_before(gateway: Gateway, request_id: str) -> None:
    """The request's approvals as a gateway before approvals kept their token kept them."""
    req = gateway.store.get_request(request_id)
    assert req is not None
    for a in req.approvals:
        a.tokens = []
    assert gateway.store.save_request(req, req.version, [])


async def test_an_approval_kept_before_approvals_kept_tokens_dies_with_its_token(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    """A partial approval recorded by an older gateway (no ``tokens``) kept counting after
    its approver's token was revoked: the second approval energized CH1."""
    olga, oscar = operator(gateway, "olga"), operator(gateway, "oscar")
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 2.5,(@1);:OUTP ON,(@1)")).request
    assert req is not None
    await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    _as_kept_before(gateway, req.id)
    revoke(gateway, "olga")
    done = await gateway.grant(req.id, oscar, ["output_enable"],
                               proposal_hash=req.proposal_hash)
    assert done.request.status is Status.PENDING, done.request.outcome
    assert done.missing == [ApprovalKind.SETPOINT]
    assert not output_on(front_panel)


async def test_a_plan_kept_before_plans_kept_tokens_ends_with_its_approvers_token(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    from bench_gate.plans import PlanStatus

    from .test_plans import active_plan
    olga, pete = operator(gateway, "olga"), operator(gateway, "pete")
    run = gateway.create_run(script, "script", goal="IV curve")
    plan_id = await active_plan(gateway, run.id, olga, pete)
    raw = gateway.store.kv_get("plans", plan_id)
    assert raw is not None and raw.pop("tokens")  # as an older gateway kept it
    gateway.store.kv_put("plans", plan_id, raw)
    _as_kept_before(gateway, str(raw["request_id"]))
    assert (await gateway.submit(run.id, "psu", "VOLT 0.5,(@1)")).status == "executed"
    revoke(gateway, "pete")
    held = await gateway.submit(run.id, "psu", "VOLT 1,(@1)")
    assert held.status == "pending", "the plan no longer stands: a person decides"
    assert gateway.get_plan(plan_id).status is PlanStatus.REVOKED
    assert Decimal(front_panel.query("VOLT? (@1)")) == Decimal("0.5")
