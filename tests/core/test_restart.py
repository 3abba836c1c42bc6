"""A restart in every status loses nothing and executes nothing twice."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Approval, ApprovalKind, Event, EventType, Principal, Status
from bench_gate.store import SqliteStore
from tests.conftest import Clock


async def _gateway(config: BenchConfig, db: Path, clock: Clock) -> Gateway:
    gw = Gateway(config, SqliteStore(db), clock=clock)
    await gw.start()
    return gw


async def _stop(gw: Gateway) -> None:
    await gw.close()
    gw.store.close()


def _force(gw: Gateway, request_id: str, status: Status, approver: str = "olga") -> None:
    """Put a request where a crash would have left it (approved, or executing)."""
    req = gw.store.get_request(request_id)
    assert req is not None
    events = []  # journaled as a grant journals them: an approval counts only so
    for kind in req.missing():
        req.approvals.append(Approval(kind=kind, by=approver, proposal_hash=req.proposal_hash))
        events.append(Event(run_id=req.run_id, request_id=req.id,
                            type=EventType.APPROVAL_GRANTED,
                            data={"kind": kind.value, "by": approver,
                                  "proposal_hash": req.proposal_hash}))
    version = req.version
    req.status = status
    assert gw.store.save_request(req, version, events)


def _completions(gw: Gateway, run_id: str) -> int:
    return sum(1 for e in gw.store.journal(run_id, limit=10_000)
               if e.type is EventType.STEP_COMPLETED)


async def test_pending_and_partly_approved_survive(config: BenchConfig, db_path: Path,
                                                   clock: Clock, script: Principal,
                                                   olga: Principal, front_panel: Any) -> None:
    gw = await _gateway(config, db_path, clock)
    run = gw.create_run(script, "script", goal="survive a restart")
    plain = (await gw.submit(run.id, "psu", "VOLT 1,(@3)")).request
    half = (await gw.submit(run.id, "psu", "VOLT 2,(@1);:OUTP ON,(@1)")).request
    assert plain is not None and half is not None
    await gw.grant(half.id, olga, ["setpoint"], proposal_hash=half.proposal_hash)
    journal_before = gw.store.journal(run.id, limit=10_000)
    await _stop(gw)

    gw = await _gateway(config, db_path, clock)
    try:
        assert gw.get_run(run.id).goal == "survive a restart"
        assert gw.get_request(plain.id).status is Status.PENDING
        again = gw.get_request(half.id)
        assert again.status is Status.PENDING
        assert again.approved_kinds() == {ApprovalKind.SETPOINT}
        assert [e.seq for e in gw.store.journal(run.id, limit=10_000)][:len(journal_before)] \
            == [e.seq for e in journal_before]
        assert Decimal(front_panel.query("VOLT? (@1)")) == 0
        done = await gw.grant(half.id, olga, ["output_enable"], proposal_hash=half.proposal_hash)
        assert done.request.status is Status.EXECUTED
    finally:
        await _stop(gw)


async def test_expiry_that_passed_while_down_is_honoured(config: BenchConfig, db_path: Path,
                                                         clock: Clock, script: Principal
                                                         ) -> None:
    gw = await _gateway(config, db_path, clock)
    run = gw.create_run(script, "script")
    req = (await gw.submit(run.id, "psu", "VOLT 1,(@1)", timeout_minutes=1)).request
    assert req is not None
    await _stop(gw)
    clock.advance(minutes=3)
    gw = await _gateway(config, db_path, clock)
    try:
        assert gw.get_request(req.id).status is Status.EXPIRED
    finally:
        await _stop(gw)


async def test_approved_but_not_executed_is_rechecked_then_run_once(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        front_panel: Any) -> None:
    gw = await _gateway(config, db_path, clock)
    run = gw.create_run(script, "script")
    ok = (await gw.submit(run.id, "psu", "VOLT 2.5,(@1)")).request
    moved = (await gw.submit(run.id, "psu", "VOLT 7,(@2)")).request
    assert ok is not None and moved is not None
    _force(gw, ok.id, Status.APPROVED)
    _force(gw, moved.id, Status.APPROVED)
    await _stop(gw)
    front_panel.write("VOLT 1.0,(@2)")  # changed while the gateway was down

    gw = await _gateway(config, db_path, clock)
    try:
        first = await gw.wait(ok.id, timeout=5)
        assert first.status is Status.EXECUTED
        assert Decimal(front_panel.query("VOLT? (@1)")) == Decimal("2.5")
        stale = gw.get_request(moved.id)
        for _ in range(50):
            if stale.status is Status.STALE:
                break
            await asyncio.sleep(0.05)
            stale = gw.get_request(moved.id)
        assert stale.status is Status.STALE
        assert Decimal(front_panel.query("VOLT? (@2)")) == 1
    finally:
        await _stop(gw)
    # A second restart runs nothing again.
    front_panel.write("VOLT 0.5,(@1)")
    gw = await _gateway(config, db_path, clock)
    try:
        await asyncio.sleep(0.2)
        assert Decimal(front_panel.query("VOLT? (@1)")) == Decimal("0.5")
        assert _completions(gw, run.id) == 1
    finally:
        await _stop(gw)


async def test_interrupted_write_is_reconciled_never_resent(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        front_panel: Any) -> None:
    gw = await _gateway(config, db_path, clock)
    run = gw.create_run(script, "script")
    landed = (await gw.submit(run.id, "psu", "VOLT 3,(@1)")).request
    lost = (await gw.submit(run.id, "psu", "VOLT 4,(@2)")).request
    assert landed is not None and lost is not None
    _force(gw, landed.id, Status.EXECUTING)
    _force(gw, lost.id, Status.EXECUTING)
    await _stop(gw)
    front_panel.write("VOLT 3.0,(@1)")  # the first write reached the instrument before the crash

    gw = await _gateway(config, db_path, clock)
    try:
        done = gw.get_request(landed.id)
        assert done.status is Status.EXECUTED
        assert done.receipt is not None and done.receipt.reconciled
        failed = gw.get_request(lost.id)
        assert failed.status is Status.FAILED
        assert "nothing is re-sent" in (failed.outcome or "")
        assert Decimal(front_panel.query("VOLT? (@2)")) == 0
    finally:
        await _stop(gw)


async def test_decided_requests_stay_decided(config: BenchConfig, db_path: Path, clock: Clock,
                                             script: Principal, olga: Principal,
                                             front_panel: Any) -> None:
    gw = await _gateway(config, db_path, clock)
    run = gw.create_run(script, "script")
    executed = (await gw.submit(run.id, "psu", "VOLT 1,(@3)")).request
    denied = (await gw.submit(run.id, "psu", "VOLT 2,(@3)")).request
    assert executed is not None and denied is not None
    await gw.grant(executed.id, olga, ["setpoint"], proposal_hash=executed.proposal_hash)
    await gw.deny(denied.id, olga, "no", proposal_hash=denied.proposal_hash)
    await _stop(gw)
    front_panel.write("VOLT 0.0,(@3)")
    gw = await _gateway(config, db_path, clock)
    try:
        await asyncio.sleep(0.2)
        assert gw.get_request(executed.id).status is Status.EXECUTED
        assert gw.get_request(denied.id).status is Status.DENIED
        assert Decimal(front_panel.query("VOLT? (@3)")) == 0, "nothing re-sent"
        assert _completions(gw, run.id) == 1
    finally:
        await _stop(gw)


async def test_approved_request_that_expired_while_down_never_runs(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        front_panel: Any) -> None:
    gw = await _gateway(config, db_path, clock)
    run = gw.create_run(script, "script")
    req = (await gw.submit(run.id, "psu", "VOLT 2,(@1)", timeout_minutes=2)).request
    assert req is not None
    _force(gw, req.id, Status.APPROVED)
    await _stop(gw)
    clock.advance(minutes=5)
    gw = await _gateway(config, db_path, clock)
    try:
        done = await gw.wait(req.id, timeout=5)
        assert done.status is Status.EXPIRED
        assert "expired before it could run" in (done.outcome or "")
        assert Decimal(front_panel.query("VOLT? (@1)")) == 0
    finally:
        await _stop(gw)


async def test_a_tampered_proposal_never_runs(config: BenchConfig, db_path: Path,
                                              clock: Clock, script: Principal,
                                              front_panel: Any) -> None:
    gw = await _gateway(config, db_path, clock)
    run = gw.create_run(script, "script")
    req = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
    assert req is not None
    _force(gw, req.id, Status.APPROVED)
    stored = gw.store.get_request(req.id)
    assert stored is not None
    stored.actions[0].canonical = "VOLT 5.9,(@1)"  # changed in the store behind our back
    assert gw.store.save_request(stored, stored.version, [])
    await _stop(gw)
    gw = await _gateway(config, db_path, clock)
    try:
        done = await gw.wait(req.id, timeout=5)
        assert done.status is Status.FAILED
        assert "does not match its hash" in (done.outcome or "")
        assert Decimal(front_panel.query("VOLT? (@1)")) == 0
    finally:
        await _stop(gw)
