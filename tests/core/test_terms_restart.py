"""A heartbeat term across a restart (bench_gate/terms.py, invariant 6): the process being
down closes no run early, and proves no client is there either. An approved request of a
run with a term waits after a start until its client is heard again; if it is not heard
for a term, the run closes and the request never runs (the simulator's own port). Before,
the restarted gateway executed it at once on a grant made while its client was gone."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, RunStatus, Status
from bench_gate.store import SqliteStore
from tests.conftest import Clock
from tests.core.test_leases import until

TERM = 2


def volts(panel: Any) -> Decimal:
    return Decimal(panel.query("VOLT? (@1)"))


async def _held_across_a_restart(config: BenchConfig, db_path: Path, clock: Clock,
                                 script: Principal) -> tuple[Gateway, str, str]:
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    run = gw.create_run(script, "agent", heartbeat_seconds=TERM)
    held = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
    assert held is not None
    await gw.close()  # as a crash leaves it: the client may have gone with it
    gw.store.close()
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    return gw, run.id, held.id


async def test_a_grant_after_a_restart_waits_for_the_client_and_never_runs_without_it(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    gw, run_id, held_id = await _held_across_a_restart(config, db_path, clock, script)
    try:
        held = gw.get_request(held_id)
        done = await gw.grant(held_id, olga, ["setpoint"], proposal_hash=held.proposal_hash)
        assert done.request.status is Status.APPROVED, done.request.outcome
        await asyncio.sleep(1.2)  # sweeps that run approved requests
        assert gw.get_request(held_id).status is Status.APPROVED
        assert volts(front_panel) == 0
        await until(lambda: gw.get_request(held_id).status is Status.CANCELLED, TERM + 1.5)
        assert gw.get_run(run_id).status is RunStatus.CLOSED
    finally:
        await gw.close()
        gw.store.close()
    assert volts(front_panel) == 0


async def test_the_client_heard_again_after_a_restart_runs_its_approved_request(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    gw, run_id, held_id = await _held_across_a_restart(config, db_path, clock, script)
    try:
        held = gw.get_request(held_id)
        await gw.grant(held_id, olga, ["setpoint"], proposal_hash=held.proposal_hash)
        gw.heartbeat(run_id, script)  # the client is back
        await until(lambda: gw.get_request(held_id).status is Status.EXECUTED, 3.0)
    finally:
        await gw.close()
        gw.store.close()
    assert volts(front_panel) == 2
