"""A plan's step counts as approved by its plan's journaled grant; that grant now names the
step's proposal hash, so a step's row edited behind the gateway's back (another command,
its hash recomputed, approved again) runs nothing at the restart."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Status, proposal_hash
from bench_gate.store import SqliteStore
from tests.conftest import Clock
from tests.core.test_plans import active_plan


async def test_a_plan_steps_row_edited_behind_the_gateways_back_runs_nothing(
        config: BenchConfig, db_path: Path, clock: Clock, script: Any, olga: Any,
        pete: Any, front_panel: Any) -> None:
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script", goal="IV curve")
        await active_plan(gw, run.id, olga, pete)  # CH1 0 to 5 V, 0.5 V a step at most
        assert (await gw.submit(run.id, "psu", "VOLT 0.5,(@1)")).status == "executed"
        steps = [r for r in gw.store.list_requests(status=Status.EXECUTED, limit=100)
                 if r.handoff.get("auto_step")]
        assert len(steps) == 1
    finally:
        await gw.close()
        gw.store.close()
    assert Decimal(front_panel.query("VOLT? (@1)")) == Decimal("0.5")
    # With the gateway stopped: the step's row says 4.5 V (a jump its plan never allows),
    # its hash and its approvals' recomputed, approved again, its expiry pushed on.
    store = SqliteStore(db_path)
    try:
        step = steps[0]
        forged = step.model_copy(deep=True)
        forged.actions[0].canonical = "VOLT 4.5,(@1)"
        forged.actions[0].text = "VOLT 4.5,(@1)"
        forged.actions[0].new = "4.500"
        forged.snapshot.values["ch1.voltage"] = "0.5"  # what the supply reads now
        forged.proposal_hash = proposal_hash(forged.instrument, ["VOLT 4.5,(@1)"],
                                             forged.snapshot, forged.revision,
                                             request=forged.id)
        for approval in forged.approvals:
            approval.proposal_hash = forged.proposal_hash
        forged.status = Status.APPROVED
        forged.expires_at = clock() + (step.expires_at - step.created_at) * 60
        stored = store.get_request(step.id)
        assert stored is not None
        assert store.save_request(forged, stored.version, [])
    finally:
        store.close()
    again = Gateway(config, SqliteStore(db_path), clock=clock)
    await again.start()  # runs what is approved
    try:
        after = again.get_request(step.id)
        deadline = time.monotonic() + 10
        while after.status in (Status.APPROVED, Status.EXECUTING) and \
                time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            after = again.get_request(step.id)
        assert after.status is Status.FAILED, (after.status, after.outcome)
        assert "not in the journal" in (after.outcome or "")
        assert Decimal(front_panel.query("VOLT? (@1)")) == Decimal("0.5")
    finally:
        await again.close()
        again.store.close()
