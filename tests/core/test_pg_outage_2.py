"""PostgreSQL down while the gateway makes a channel safe: more of it (test_pg_outage.py).

- A lease taken before the lease sweep had read the store once (right after a start: an
  approved request run by the restart, a client's first OUTP ON) was known only to the
  store: with the store gone, every sweep failed to read the leases and the lost client's
  CH1 stayed on for as long as PostgreSQL was down.
- What a lease run out with the store down ends (the plan over CH1, the setpoint in force)
  is ended across a restart too: the gateway holds the instrument stopped, the hold is kept
  once the store is back, and the restart's first look at the stops stands it down.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from bench_gate import lifecycle
from bench_gate.config import BenchConfig
from bench_gate.errors import GatewayError
from bench_gate.gateway import Gateway
from bench_gate.models import ApprovalKind, Principal, Status
from bench_gate.states import PlanStatus
from bench_gate.store import open_store
from tests import pg
from tests.conftest import Clock
from tests.core.test_emergency_stop import energize
from tests.core.test_leases import LEASE
from tests.core.test_pg_outage import _lease_ended, _until, cluster  # noqa: F401
from tests.core.test_plans import active_plan
from tests.core.test_stop_holes import off_within


def _kept(gw: Gateway, key: str) -> bool:
    with contextlib.suppress(GatewayError):
        return key in dict(gw.store.kv_items("stops"))
    return False


async def test_what_a_lease_run_out_with_the_store_down_ends_survives_a_restart(
        cluster: pg.PgCluster, config: BenchConfig, clock: Clock,  # noqa: F811
        script: Principal, olga: Principal, pete: Principal, front_panel: Any) -> None:
    config.policy.lease_seconds = LEASE
    config.policy.on_client_lost = "safe"
    config.policy.watch_seconds = 0  # the lease alone, not the envelope watch
    url = cluster.new_database()
    gw = Gateway(config, open_store(url), clock=clock)
    await gw.start()
    try:
        run_id = await energize(gw, script, olga)  # VOLT 2 and OUTP ON on CH1: approved
        plan_run = gw.create_run(script, "script").id
        plan_id = await active_plan(gw, plan_run, olga, pete)
        assert front_panel.query("OUTP? (@1)").strip() == "1"
        assert [lease["run_id"] for lease in gw.leases()] == [run_id]
        cluster.stop("immediate")
        off = await asyncio.to_thread(off_within, front_panel, LEASE + 6, (1,))
        assert off is not None, "CH1 left on after its client's lease ran out"
        cluster.start()
        assert await _until(lambda: _lease_ended(gw, run_id), 15), "the lease never ended"
        # Held stopped on this gateway, then kept in the store by a sweep: the restart.
        assert await _until(lambda: _kept(gw, f"{config.bench}/psu"), 15), "never kept"
    finally:
        if not cluster.running:
            cluster.start()
        await gw.close()
        gw.store.close()

    gw = Gateway(config, open_store(url), clock=clock)  # the restart
    await gw.start()
    try:

        if "psu" in gw.stopped():  # held stopped: an operator clears it
            gw.clear_stop(olga)
        await gw.submit(plan_run, "psu", "OUTP ON,(@1)")  # in the plan's scope
        assert front_panel.query("OUTP? (@1)").strip() == "0", "the plan switched CH1 on"
        assert gw.get_plan(plan_id).status is not PlanStatus.ACTIVE
        run = gw.create_run(script, "script")
        res = await gw.submit(run.id, "psu", "OUTP ON,(@1)")
        assert front_panel.query("OUTP? (@1)").strip() == "0", "ran unattended"
        req = res.request
        assert req is not None and req.status is Status.PENDING, res
        assert ApprovalKind.SETPOINT in req.required, "the setpoint in force outlived it"
        await gw.grant(req.id, pete, ["output_enable"], proposal_hash=req.proposal_hash)
        assert front_panel.query("OUTP? (@1)").strip() == "0"
    finally:
        await gw.close()
        gw.store.close()


async def test_a_lease_taken_before_the_first_lease_sweep_runs_out_with_the_store_down(
        cluster: pg.PgCluster, config: BenchConfig, clock: Clock,  # noqa: F811
        script: Principal, olga: Principal, front_panel: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first lease sweep comes a sweep period after the start (made longer here so the
    lease is surely taken and the store gone before it): the lease is run out anyway."""
    monkeypatch.setattr(lifecycle, "SWEEP_SECONDS", 2.0)
    config.policy.lease_seconds = LEASE
    config.policy.on_client_lost = "safe"
    config.policy.watch_seconds = 0  # the lease alone, not the envelope watch
    url = cluster.new_database()
    gw = Gateway(config, open_store(url), clock=clock)
    await gw.start()
    try:
        run_id = await energize(gw, script, olga)
        cluster.stop("immediate")
        assert front_panel.query("OUTP? (@1)").strip() == "1"
        off = await asyncio.to_thread(off_within, front_panel, LEASE + 8, (1,))
        assert off is not None, "CH1 left on after its client's lease ran out"
        cluster.start()
        assert await _until(lambda: _lease_ended(gw, run_id), 15), "the lease never ended"
    finally:
        if not cluster.running:
            cluster.start()
        await gw.close()
        gw.store.close()
