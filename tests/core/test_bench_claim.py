"""One bench, one owner: a bench name's claim is a compare-and-set, and a gateway whose
claim another gateway took over (it was paused, or cut off from the store, longer than a
claim lives) writes to no instrument again."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from bench_gate.config import default_config
from bench_gate.errors import BenchTaken
from bench_gate.federation import TABLE, Registry
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from bench_gate.store import SqliteStore, open_store
from sim_instruments import SimBenchThread
from tests import pg
from tests.conftest import own_port

pg_cluster = pg.pg_cluster


class _ReadThenRace:
    """The store as a starting gateway sees it: right after it reads the bench's claim
    (finding none, or a stale one), another gateway claims the name."""

    def __init__(self, store: Any, other: Registry) -> None:
        self._store = store
        self._other = other
        self._raced = False

    def kv_get(self, table: str, key: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self._store.kv_get(table, key)
        if table == TABLE and not self._raced:
            self._raced = True
            self._other.claim()
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _two_at_once(url: str, sim: SimBenchThread) -> None:
    config = default_config(sim.psu_port, sim.dmm_port)
    store = open_store(url)
    try:
        other = Registry(store, config)
        first = Registry(_ReadThenRace(store, other), config)
        with pytest.raises(BenchTaken, match="already served by a live gateway"):
            first.claim()
        held = store.kv_get(TABLE, config.bench)
        assert held is not None and held["instance"] == other.instance
    finally:
        store.close()


def test_two_gateways_starting_at_once_on_sqlite_one_gets_the_bench(
        sim: SimBenchThread, tmp_path: Path) -> None:
    """Each read the claim, found it free and wrote its own: both served the bench, each
    with its own execution lock on one supply. Now the second write finds the first."""
    _two_at_once(str(tmp_path / "bench.db"), sim)


def test_two_gateways_starting_at_once_on_postgresql_one_gets_the_bench(
        sim: SimBenchThread, pg_cluster: pg.PgCluster) -> None:
    _two_at_once(pg_cluster.new_database(), sim)


def _take_over(store: Any, bench: str) -> None:
    """Another gateway claims the name, as a start does once this one's claim looks stale."""
    store.kv_put(TABLE, bench, {"instance": "the-other-one", "host": "elsewhere", "pid": 1,
                                "heartbeat": store.clock_seconds(), "rules": {}})


async def _alert(heard: asyncio.Queue[dict[str, Any]], alert: str) -> dict[str, Any]:
    while True:
        message = await heard.get()
        if message.get("type") == "alert" and message.get("alert") == alert:
            return message


async def test_a_gateway_whose_bench_was_taken_over_writes_nothing(
        sim: SimBenchThread, tmp_path: Path, script: Principal, olga: Principal) -> None:
    """A gateway that did not renew its claim in time (a pause) found another's claim at
    its next beat, and went on serving: a write approved on it then ran beside the new
    owner's. Now it is fenced: every write is refused -203, an approved one ends failed,
    nothing reaches the supply, and every console hears why."""
    config = default_config(sim.psu_port, sim.dmm_port)
    gw = Gateway(config, SqliteStore(tmp_path / "bench.db"))
    await gw.start()
    try:
        async with gw.core.notifier.subscribe() as heard:
            run = gw.create_run(script, "script")
            held = (await gw.submit(run.id, "psu", "VOLT 2.5,(@1)")).request
            assert held is not None and held.status is Status.PENDING
            _take_over(gw.store, config.bench)
            deadline = time.monotonic() + 10
            while gw.core.registry.lost is None and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert gw.core.registry.lost is not None, "the beat never saw the other claim"
            await gw.grant(held.id, olga, ["setpoint"], proposal_hash=held.proposal_hash)
            after = gw.get_request(held.id)
            while after.status in (Status.APPROVED, Status.EXECUTING) and \
                    time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                after = gw.get_request(held.id)
            assert after.status is Status.FAILED, after.status
            assert "no longer serves bench" in (after.outcome or "")
            refused = await gw.submit(run.id, "psu", "VOLT 3,(@1)")
            assert refused.code == -203 and "no longer serves bench" in refused.reason
            said = await asyncio.wait_for(_alert(heard, "bench_lost"), timeout=10)
            assert "restarted" in said["reason"]
            with own_port(sim.psu_resource_name, panel=True) as psu:
                assert float(psu.query("VOLT? (@1)")) == 0.0
    finally:
        await gw.close()
        gw.store.close()
