"""A plan's end cut off: by a crash before each store write of an emergency stop over a
standing plan (the store as a SIGKILL there leaves it: tests/core/test_crash_stop_journal.py),
and by a store that refuses its event. The restart, or the next sweep, finishes it:
``plan_revoked`` journaled once, the run suspended; never a run an operator released after
an older stop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench_gate.config import BenchConfig
from bench_gate.errors import GatewayError, StoreError
from bench_gate.federation import TABLE
from bench_gate.gateway import Gateway
from bench_gate.models import Event, EventType, Principal, RunStatus
from bench_gate.plans import PlanStatus
from bench_gate.store import PostgresStore, SqliteStore
from tests import pg
from tests.conftest import Clock
from tests.core.test_crash_stop_journal import _Snapping
from tests.core.test_plans import active_plan


def _revoked(store: Any, run_id: str, plan_id: str) -> int:
    return sum(e.type is EventType.PLAN_REVOKED and e.data.get("plan_id") == plan_id
               for e in store.journal(run_id, limit=1000))


async def test_a_crash_at_every_write_of_a_stop_over_a_plan(
        config: BenchConfig, db_path: Path, tmp_path: Path, clock: Clock, script: Principal,
        olga: Principal, pete: Principal, front_panel: Any) -> None:
    """A crash after the plan was saved revoked and before its ``plan_revoked`` event left
    the plan revoked with no word of it in the journal, and its run active: the restart
    finished the stop, found no plan left to end, and suspended nothing. The same after the
    event and before the run's suspension. Now the restart finishes the plan's end first."""
    store = _Snapping(db_path, tmp_path)
    gw = Gateway(config, store, clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script", goal="IV curve")
        plan_id = await active_plan(gw, run.id, olga, pete)
        store.armed = True
        await gw.emergency_stop(olga, "test", "psu")
        store.armed = False
    finally:
        await gw.close()
        store.close()
    assert len(store.snaps) >= 5, store.snaps

    holes: list[str] = []
    for i, (copy, where) in enumerate(store.snaps):
        left = SqliteStore(copy)
        try:
            left.kv_delete(TABLE, config.bench)  # the dead gateway's claim (this pid)
        finally:
            left.close()
        gw = Gateway(config, SqliteStore(copy), clock=clock)
        await gw.start()
        try:
            said = f"crash {i} {where}"
            plan = gw.get_plan(plan_id)
            events = _revoked(gw.store, run.id, plan_id)
            if "psu" in gw.stopped():
                assert plan.status is PlanStatus.REVOKED, (said, plan.status)
                assert events == 1, (said, events)
                assert gw.get_run(run.id).status is RunStatus.SUSPENDED, said
                assert front_panel.query("OUTP? (@1)").strip() == "0", said
            else:  # cut off before the stop was kept: no stop, nothing ended
                assert plan.status is PlanStatus.ACTIVE and events == 0, (said, plan.status)
            assert gw.verify_journal().intact, said
        except AssertionError as exc:  # every crash point is tried: all holes are shown
            holes.append(str(exc))
        finally:
            await gw.close()
            gw.store.close()
    assert not holes, "\n".join(holes)


class _RefusesPlanEvents(SqliteStore):
    """Armed, refuses to journal a plan's end (a disk full for a moment): the rest works."""

    armed = False

    def append(self, events: list[Event], durable: bool = True) -> list[Event]:
        if self.armed and any(e.type is EventType.PLAN_REVOKED for e in events):
            raise StoreError("database is locked (injected)")
        return super().append(events, durable)


async def test_a_revoke_whose_event_the_store_refused_is_journaled_by_a_sweep(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, pete: Principal) -> None:
    """An operator revokes a plan; the store saves it revoked, then refuses its event (a
    503). The plan stayed revoked with no ``plan_revoked`` in the journal for good. Now the
    next sweep journals it, once."""
    store = _RefusesPlanEvents(db_path)
    gw = Gateway(config, store, clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script", goal="IV curve")
        plan_id = await active_plan(gw, run.id, olga, pete)
        store.armed = True
        try:
            gw.revoke_plan(plan_id, olga)
        except StoreError:
            pass  # a 503: the plan's end is finished once the store takes it
        store.armed = False
        assert gw.get_plan(plan_id).status is PlanStatus.REVOKED
        for _ in range(40):  # bounded: a sweep every 0.5 s
            if _revoked(store, run.id, plan_id):
                break
            await asyncio.sleep(0.1)
        for _ in range(10):  # and never twice
            await asyncio.sleep(0.1)
        assert _revoked(store, run.id, plan_id) == 1
        assert gw.get_run(run.id).status is RunStatus.ACTIVE  # no stop: nothing suspended
    finally:
        await gw.close()
        gw.store.close()


async def test_a_run_released_after_an_older_stop_is_not_suspended_again(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, pete: Principal) -> None:
    """A stop ends the run's plan and suspends the run; before any sweep the operator clears
    the stop and releases the run; then the gateway restarts. The plan's end kept with it
    (a stop's, until a sweep sees the run suspended) must not suspend the run again."""
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script", goal="IV curve")
        plan_id = await active_plan(gw, run.id, olga, pete)
        await gw.emergency_stop(olga, "test", "psu")
        assert gw.get_run(run.id).status is RunStatus.SUSPENDED
        gw.clear_stop(olga, "psu")
        gw.release(run.id, olga)
        assert gw.get_run(run.id).status is RunStatus.ACTIVE
    finally:
        await gw.close()
        gw.store.close()
    again = Gateway(config, SqliteStore(db_path), clock=clock)
    await again.start()
    try:
        for _ in range(10):  # a few sweeps
            await asyncio.sleep(0.1)
        assert again.get_run(run.id).status is RunStatus.ACTIVE
        assert again.get_plan(plan_id).status is PlanStatus.REVOKED
        assert _revoked(again.store, run.id, plan_id) == 1
    finally:
        await again.close()
        again.store.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[pg.PgCluster]:
    """A server of its own: this test stops it."""
    with pg.start_or_skip() as c:
        yield c


class _DiesAtThePlansEnd(PostgresStore):
    """The database stops just as a plan's end is journaled."""

    kill: Callable[[], None] | None = None

    def append(self, events: list[Event], durable: bool = True) -> list[Event]:
        if self.kill is not None and any(e.type is EventType.PLAN_REVOKED for e in events):
            kill, self.kill = self.kill, None
            kill()
        return super().append(events, durable)


async def test_a_stop_over_a_plan_while_postgresql_goes_away_suspends_its_run_later(
        cluster: pg.PgCluster, config: BenchConfig, clock: Clock, script: Principal,
        olga: Principal, pete: Principal, front_panel: Any) -> None:
    """A stop over a plan; PostgreSQL stops right as the plan's end is journaled (the plan
    already saved revoked). Once the server was back the stop's stand-down was done again,
    found no plan left to end, and the run stayed active with no ``plan_revoked``. Now a
    sweep finishes the plan's end: journaled once, the run suspended."""
    store = _DiesAtThePlansEnd(cluster.new_database(), pool_timeout=1.0)
    gw = Gateway(config, store, clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script", goal="IV curve")
        plan_id = await active_plan(gw, run.id, olga, pete)
        store.kill = lambda: cluster.stop("immediate")
        done = await gw.emergency_stop(olga, "test", "psu")
        assert store.kill is None and "store_error" in done, done
        assert front_panel.query("OUTP? (@1)").strip() == "0"
        cluster.start()
        suspended = False
        for _ in range(150):  # bounded: the sweeps once the server is back
            with contextlib.suppress(GatewayError):
                suspended = gw.get_run(run.id).status is RunStatus.SUSPENDED and \
                    _revoked(gw.store, run.id, plan_id) == 1
                if suspended:
                    break
            await asyncio.sleep(0.1)
        for _ in range(10):  # and never twice
            await asyncio.sleep(0.1)
        assert suspended, gw.get_run(run.id).status
        assert _revoked(gw.store, run.id, plan_id) == 1
        assert gw.get_plan(plan_id).status is PlanStatus.REVOKED
    finally:
        if not cluster.running:
            cluster.start()
        await gw.close()
        gw.store.close()
