"""The gateway makes a channel safe under one of an instrument's names: what stands on that
channel ends under every name of the same instrument (stop_names.same), as a stop's does.

The DP832 (not lockable) is on the bench twice, ``dp832`` and ``other`` (one resource). A
run switched CH1 on through ``dp832`` and its client was lost: its lease ran out and CH1
went off. The plans over ``dp832`` CH1 ended, but a plan over ``other`` CH1 (the same
channel of the same supply) stood, and its ``OUTP CH1,ON`` switched CH1 on again
unattended, the person who may now be at the DUT unasked.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bench_gate.config import InstrumentConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from bench_gate.plans import PlanStatus
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import Clock, own_port, served_bench
from tests.core.test_leases import LEASE
from tests.instruments.test_dp832 import LIMITS

SCOPE = {"instrument": "other", "channels": [1], "voltage": [0, 5], "current_max": 0.5,
         "max_step": 5, "output_enable": True, "max_writes": 40, "timeout_minutes": 30}


async def test_a_lease_run_out_under_one_name_ends_the_plan_under_another(
        sim: SimBenchThread, db_path: Any, clock: Clock, script: Principal,
        olga: Principal, pete: Principal) -> None:
    with SimServedThread("dp832") as served:
        cfg = served_bench(sim, "dp832", served, "dp832", LIMITS)
        cfg.instruments.append(InstrumentConfig(
            name="other", resource=served.resource_name, profile="dp832"))
        cfg.envelope["other"] = LIMITS
        cfg.policy.lease_seconds = LEASE
        cfg.policy.on_client_lost = "safe"
        cfg.policy.watch_seconds = 0  # the lease alone
        gw = Gateway(cfg, SqliteStore(db_path), clock=clock)
        await gw.start()
        try:
            plan_run = gw.create_run(script, "script").id
            req = await gw.request_plan(plan_run, SCOPE, rationale="IV sweep of CH1")
            await gw.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
            await gw.grant(req.id, pete, ["output_enable"], proposal_hash=req.proposal_hash)
            assert req.plan_id is not None
            assert gw.get_plan(req.plan_id).status is PlanStatus.ACTIVE
            lost = gw.create_run(Principal(name="bot-2"), "script")
            on = (await gw.submit(lost.id, "dp832", "SOUR1:VOLT 2;:SOUR1:CURR 0.4;"
                                  ":OUTP CH1,ON")).request
            assert on is not None
            done = await gw.grant(on.id, olga, [k.value for k in on.required],
                                  proposal_hash=on.proposal_hash)
            assert done.request.status is Status.EXECUTED, done.request.outcome
            with own_port(served.resource_name) as port:
                assert port.query("OUTP? CH1") == "ON"
                for _ in range(200):  # the plan's client is here (reads); bot-2's is gone
                    await gw.submit(plan_run, "other", "SOUR1:VOLT?")
                    if port.query("OUTP? CH1") == "OFF":
                        break
                    await asyncio.sleep(0.05)
                assert port.query("OUTP? CH1") == "OFF", "the lease never ran out"
                await gw.submit(plan_run, "other", "SOUR1:VOLT 1")  # a step of its own
                res = await gw.submit(plan_run, "other", "OUTP CH1,ON")
                assert port.query("OUTP? CH1") == "OFF", f"CH1 on again, unattended: {res}"
            assert gw.get_plan(req.plan_id).status is not PlanStatus.ACTIVE
        finally:
            await gw.close()
            gw.store.close()
