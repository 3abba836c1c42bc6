"""A stop's stand-down (cancelling what waits, ending the plans, suspending the runs) that
the store refused when the stop was pressed is never lost: done by the sweeper once the
store is back, and by the restart if the gateway goes down first. Before, it was kept in
this process's memory alone, for the clear to finish: a restart forgot it, the clear then
ended nothing, and a standing plan approved before the stop switched CH1 on again with no
click. Every output is read on the simulator's own port."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench_gate.config import BenchConfig
from bench_gate.errors import StoreError
from bench_gate.gateway import Gateway
from bench_gate.interlocks import STOPS
from bench_gate.models import Principal, RunStatus, Status
from bench_gate.plans import PlanStatus
from bench_gate.store import SqliteStore
from tests import waits
from tests.conftest import Clock
from tests.core.test_plans import active_plan


def until(check: Callable[[], Any], seconds: float = 8.0) -> Awaitable[bool]:
    return waits.until(check, seconds)


async def stopped_while_locked(gw: Gateway, db_path: Path, olga: Principal) -> dict[str, Any]:
    other = sqlite3.connect(db_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # a backup, a stuck process: the store locked
        done = await asyncio.wait_for(gw.emergency_stop(olga, "test", "psu"), 60)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert "store_error" in done, done
    return done


async def energized_in_a_plan(gw: Gateway, script: Principal, olga: Principal,
                              pete: Principal, front_panel: Any) -> tuple[str, str, str]:
    run = gw.create_run(script, "script", goal="sweep")
    plan_id = await active_plan(gw, run.id, olga, pete)
    for message in ("CURR 0.5,(@1)", "VOLT 0.5,(@1)", "OUTP ON,(@1)"):
        assert (await gw.submit(run.id, "psu", message)).status == "executed", message
    other = gw.create_run(Principal(name="bot2"), "script")
    held = (await gw.submit(other.id, "psu", "VOLT 3,(@2)")).request
    assert held is not None and front_panel.query("OUTP? (@1)").strip() == "1"
    return run.id, plan_id, held.id


async def test_a_refused_stand_down_is_done_once_the_store_is_back(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, pete: Principal, front_panel: Any) -> None:
    gw = Gateway(config, SqliteStore(db_path, busy_timeout=0.2), clock=clock)
    await gw.start()
    try:
        run_id, plan_id, held_id = await energized_in_a_plan(gw, script, olga, pete,
                                                             front_panel)
        await stopped_while_locked(gw, db_path, olga)
        assert front_panel.query("OUTP? (@1)").strip() == "0"
        assert await until(lambda: gw.get_plan(plan_id).status is PlanStatus.REVOKED)
        assert gw.get_request(held_id).status is Status.CANCELLED
        assert gw.get_run(run_id).status is RunStatus.SUSPENDED
    finally:
        await gw.close()
        gw.store.close()


class Refusing(SqliteStore):
    """A store that refuses writes to the tables named in ``refuse`` (a disk full for a
    moment, a lock on one table's pages): the rest works."""

    refuse: frozenset[str] = frozenset()

    def kv_put(self, table: str, key: str, data: dict[str, Any]) -> None:
        if table in self.refuse:
            raise StoreError(f"{table}: database is locked (injected)")
        super().kv_put(table, key, data)


async def test_a_refused_stand_down_survives_a_restart(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, pete: Principal, front_panel: Any) -> None:
    """The stop could not be kept when pressed, nor its plan ended. The store took the stop
    back a sweep later (kept: test_stop_kept_later.py), still not the plan; then the
    gateway went down. Started again and cleared: the plan's next write must not switch
    CH1 on with no click; it was ended by the restart, before the clear."""
    store = Refusing(db_path)
    gw = Gateway(config, store, clock=clock)
    await gw.start()
    try:
        run_id, plan_id, held_id = await energized_in_a_plan(gw, script, olga, pete,
                                                             front_panel)
        store.refuse = frozenset({STOPS, "stops_unfinished", "plans"})
        done = await gw.emergency_stop(olga, "test", "psu")
        assert "store_error" in done, done
        assert front_panel.query("OUTP? (@1)").strip() == "0"
        store.refuse = frozenset({"plans"})
        assert await until(lambda: any(key.endswith("/psu")
                                       for key, _ in store.kv_items(STOPS)))
        assert gw.get_plan(plan_id).status is PlanStatus.ACTIVE  # the store refuses it
    finally:
        await gw.close()
        gw.store.close()
    again = Gateway(config, SqliteStore(db_path), clock=clock)
    await again.start()
    try:
        assert "psu" in again.stopped()
        assert again.get_plan(plan_id).status is PlanStatus.REVOKED
        again.clear_stop(pete)
        assert again.get_request(held_id).status is Status.CANCELLED
        assert again.get_run(run_id).status is RunStatus.SUSPENDED
        after = await again.submit(run_id, "psu", "OUTP ON,(@1)")
        assert after.status != "executed", after
        assert front_panel.query("OUTP? (@1)").strip() == "0"
    finally:
        await again.close()
        again.store.close()
