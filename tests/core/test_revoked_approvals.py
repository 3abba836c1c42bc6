"""An approval counts only while the token it was given with stands (invariant 3). A leaked
token is revoked because someone else's hands may have used it: every approval it gave and
that has not yet run stops counting, wherever it waits (a partial approval, an approved
request whose bench was away, a standing plan, the setpoint in force behind a later output
enable). Each case shows the simulator's own port unchanged."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bench_gate.auth import Tokens
from bench_gate.config import BenchConfig
from bench_gate.errors import PermissionDenied
from bench_gate.gateway import Gateway
from bench_gate.models import ApprovalKind, EventType, Principal, Status
from bench_gate.plans import PlanStatus
from bench_gate.store import SqliteStore
from tests.conftest import Clock

from .test_plans import active_plan


def operator(gw: Gateway, name: str) -> Principal:
    """A person deciding with a token of their own, as every door authenticates them."""
    tokens = Tokens(gw.store)
    secret = tokens.create(name, "operator")[1]
    who = tokens.verify(secret)
    assert who is not None and who.token
    return who


def revoke(gw: Gateway, name: str) -> None:
    """As ``bench-gate token revoke`` does: on the store, the gateway not told."""
    assert Tokens(gw.store).revoke(name) == 1


def events(gw: Gateway, run_id: str, kind: EventType) -> list[dict[str, Any]]:
    return [e.data for e in gw.store.journal(run_id, limit=10_000) if e.type is kind]


def output_on(panel: Any) -> bool:
    return panel.query("OUTP? (@1)").strip() in ("1", "ON")


async def test_a_partial_approval_by_a_revoked_token_no_longer_counts(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    olga, oscar, ida = (operator(gateway, n) for n in ("olga", "oscar", "ida"))
    run = gateway.create_run(script, "script")
    before = Decimal(front_panel.query("VOLT? (@1)"))
    req = (await gateway.submit(run.id, "psu", "VOLT 2.5,(@1);:OUTP ON,(@1)")).request
    assert req is not None and set(req.required) == {ApprovalKind.SETPOINT,
                                                     ApprovalKind.OUTPUT_ENABLE}
    await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    revoke(gateway, "olga")
    done = await gateway.grant(req.id, oscar, ["output_enable"],
                               proposal_hash=req.proposal_hash)
    assert done.request.status is Status.PENDING, done.request.outcome
    assert done.missing == [ApprovalKind.SETPOINT]
    assert [a.by for a in done.request.approvals] == ["oscar"]
    withdrawn = events(gateway, run.id, EventType.APPROVAL_WITHDRAWN)
    assert [(w["kind"], w["by"]) for w in withdrawn] == [("setpoint", "olga")]
    assert withdrawn[0]["tokens"] == [olga.token]
    assert Decimal(front_panel.query("VOLT? (@1)")) == before and not output_on(front_panel)
    # Someone who still holds a token gives it again, and it runs.
    final = await gateway.grant(req.id, ida, ["setpoint"], proposal_hash=req.proposal_hash)
    assert final.request.status is Status.EXECUTED, final.request.outcome
    assert Decimal(front_panel.query("VOLT? (@1)")) == Decimal("2.5") and output_on(front_panel)


async def test_a_revoked_approver_decides_nothing_even_within_the_trust_window(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    """A verified token is trusted a moment without a lookup; a grant looks anyway."""
    olga = operator(gateway, "olga")
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 1.5,(@1)")).request
    assert req is not None
    revoke(gateway, "olga")
    with pytest.raises(PermissionDenied, match="revoked"):
        await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    assert gateway.get_request(req.id).approvals == []
    assert Decimal(front_panel.query("VOLT? (@1)")) != Decimal("1.5")


async def test_an_approved_request_whose_approver_was_revoked_while_its_bench_was_away_fails(
        config: BenchConfig, db_path: Path, script: Principal, clock: Clock,
        front_panel: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    olga, oscar = operator(gw, "olga"), operator(gw, "oscar")
    before = Decimal(front_panel.query("VOLT? (@1)"))
    run = gw.create_run(script, "script")
    req = (await gw.submit(run.id, "psu", "VOLT 3.5,(@1);:OUTP ON,(@1)")).request
    assert req is not None
    await gw.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    with monkeypatch.context() as away:
        away.setattr(gw.core, "owns", lambda r: False)  # its bench is away
        done = await gw.grant(req.id, oscar, ["output_enable"],
                              proposal_hash=req.proposal_hash)
    assert done.request.status is Status.APPROVED
    await gw.close()
    gw.store.close()
    back = Gateway(config, SqliteStore(db_path), clock=clock)
    revoke(back, "oscar")
    await back.start()  # the bench is back and runs what is approved and its own
    try:
        for _ in range(100):
            if back.get_request(req.id).status is not Status.APPROVED:
                break
            await asyncio.sleep(0.02)
        final = back.get_request(req.id)
        assert final.status is Status.FAILED, final.outcome
        assert "the output_enable approval by oscar no longer counts" in (final.outcome or "")
    finally:
        await back.close()
        back.store.close()
    assert Decimal(front_panel.query("VOLT? (@1)")) == before and not output_on(front_panel)


async def test_a_plan_ends_when_a_token_that_approved_it_is_revoked(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    olga, pete = operator(gateway, "olga"), operator(gateway, "pete")
    run = gateway.create_run(script, "script", goal="IV curve")
    plan_id = await active_plan(gateway, run.id, olga, pete)
    inside = await gateway.submit(run.id, "psu", "VOLT 0.5,(@1)")
    assert inside.status == "executed"
    revoke(gateway, "pete")
    held = await gateway.submit(run.id, "psu", "VOLT 1,(@1)")
    assert held.status == "pending", "the plan no longer stands: a person decides"
    plan = gateway.get_plan(plan_id)
    assert plan.status is PlanStatus.REVOKED and pete.token in (plan.revoked_by or "")
    assert any(e.get("tokens") == [pete.token]
               for e in events(gateway, run.id, EventType.PLAN_REVOKED))
    assert Decimal(front_panel.query("VOLT? (@1)")) == Decimal("0.5")


async def test_a_setpoint_in_force_stops_covering_an_output_enable_once_its_token_is_revoked(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    """Energizing needs a setpoint approval and an output-enable approval. A setpoint
    approved with a revoked token is nobody's: switching on asks for both again, so on a
    two-person bench one remaining person cannot energize on it alone."""
    gateway.config.policy.two_person_output_enable = True
    olga, oscar = operator(gateway, "olga"), operator(gateway, "oscar")
    run = gateway.create_run(script, "script")
    set_ = (await gateway.submit(run.id, "psu", "VOLT 2,(@1);:CURR 0.1,(@1)")).request
    assert set_ is not None
    done = await gateway.grant(set_.id, olga, ["setpoint"], proposal_hash=set_.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.request.outcome
    on = (await gateway.submit(run.id, "psu", "OUTP ON,(@1)")).request
    assert on is not None and on.required == [ApprovalKind.OUTPUT_ENABLE], \
        "the setpoint in force covers it while olga's token stands"
    revoke(gateway, "olga")
    # Filed while olga's token stood: at its recheck the setpoint behind it is nobody's,
    # so it goes back for review as a request that asks for the setpoint too.
    stale = await gateway.grant(on.id, oscar, ["output_enable"], proposal_hash=on.proposal_hash)
    assert stale.request.status is Status.STALE, stale.request.outcome
    assert stale.request.superseded_by is not None
    fresh = gateway.get_request(stale.request.superseded_by)
    assert set(fresh.required) == {ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE}
    assert not output_on(front_panel)
    await gateway.cancel(fresh.id, script)
    again = (await gateway.submit(run.id, "psu", "OUTP ON,(@1)")).request
    assert again is not None
    assert set(again.required) == {ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE}
    with pytest.raises(PermissionDenied):  # one person cannot give both halves
        await gateway.grant(again.id, oscar, ["setpoint", "output_enable"],
                            proposal_hash=again.proposal_hash)
    assert not output_on(front_panel)
