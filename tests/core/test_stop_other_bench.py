"""A stop pressed on one bench of a shared store ends what waits on the same instrument on
every other bench too: bench B's standing plan over the DP832 both benches reach stayed
active through bench A's stop (only refused while it held), and once A cleared it the plan
switched CH1 on again with no click. Every output is read on the simulator's own port."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench_gate.gateway import Gateway
from bench_gate.models import Principal, RunStatus, Status
from bench_gate.plans import PlanStatus
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread, SimServedThread
from tests import waits
from tests.conftest import own_port, served_bench
from tests.instruments.test_dp832 import LIMITS

SCOPE = {"instrument": "dp832", "channels": [1], "voltage": [0, 5], "current_max": 0.5,
         "max_step": 0.5, "output_enable": True, "max_writes": 40, "timeout_minutes": 30}


def until(check: Callable[[], Any], seconds: float = 8.0) -> Awaitable[bool]:
    return waits.until(check, seconds)


async def test_a_stop_on_one_bench_ends_the_plans_of_every_bench_on_the_instrument(
        tmp_path: Path, script: Principal, olga: Principal, pete: Principal) -> None:
    db = tmp_path / "shared.db"
    with SimServedThread("dp832") as supply, SimBenchThread() as sim_a, \
            SimBenchThread() as sim_b:
        gws = []
        for bench, sim in (("bench-a", sim_a), ("bench-b", sim_b)):
            cfg = served_bench(sim, "dp832", supply, "dp832", LIMITS)
            cfg.bench = bench
            gw = Gateway(cfg, SqliteStore(db))
            await gw.start()
            gws.append(gw)
        a, b = gws
        try:
            run = b.create_run(script, "script", goal="sweep")
            req = await b.request_plan(run.id, SCOPE, rationale="IV sweep of CH1")
            await b.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
            await b.grant(req.id, pete, ["output_enable"], proposal_hash=req.proposal_hash)
            assert req.plan_id is not None
            for message in ("SOUR1:CURR 0.5", "SOUR1:VOLT 0.5", "OUTP CH1,ON"):
                assert (await b.submit(run.id, "dp832", message)).status == "executed"
            other = b.create_run(Principal(name="bot2"), "script")
            held = (await b.submit(other.id, "dp832", "SOUR2:VOLT 3")).request
            assert held is not None
            await a.emergency_stop(olga, "test", "dp832")
            with own_port(supply.resource_name) as port:
                assert port.query("OUTP? CH1") == "OFF"
            assert await until(lambda: b.get_plan(req.plan_id).status is PlanStatus.REVOKED)
            assert b.get_request(held.id).status is Status.CANCELLED
            assert b.get_run(run.id).status is RunStatus.SUSPENDED
            a.clear_stop(olga)
            after = await b.submit(run.id, "dp832", "OUTP CH1,ON")
            assert after.status != "executed", after
            with own_port(supply.resource_name) as port:
                assert port.query("OUTP? CH1") == "OFF"
        finally:
            for gw in gws:
                await gw.close()
                gw.store.close()
