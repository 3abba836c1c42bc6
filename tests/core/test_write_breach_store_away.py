"""A write's own envelope breach while the store refuses its event: the alert goes at once,
the channel is off on the simulator's own port, and the breach is journaled once the store
takes it again (as the envelope watch does: later.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench_gate.config import BenchConfig
from bench_gate.errors import GatewayError, StoreError
from bench_gate.gateway import Gateway
from bench_gate.models import Event, EventType, Principal, Status
from bench_gate.store import PostgresStore, SqliteStore
from tests import pg
from tests.conftest import Clock
from tests.core.test_envelope_state import grant_all


class _RefusesBreaches(SqliteStore):
    """Armed, refuses to journal an envelope breach (a disk full, a lock held): the rest
    works."""

    armed = False

    def append(self, events: list[Event], durable: bool = True) -> list[Event]:
        if self.armed and any(e.type is EventType.ENVELOPE_BREACH for e in events):
            raise StoreError("database is locked (injected)")
        return super().append(events, durable)


def _breaches(gw: Gateway, run_id: str) -> list[Event]:
    return [e for e in gw.store.journal(run_id, limit=1000)
            if e.type is EventType.ENVELOPE_BREACH]


async def test_a_writes_breach_is_told_and_journaled_when_the_store_refuses_it(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    """The panel put CH3 at 15 V, on, above its 12 V limit; a write to CH1 reads it back and
    switches CH3 off. The breach was journaled before it was told: the store refused the
    event, so no console heard why CH3 went off, the write's outcome was never kept (a 503),
    and the breach was never journaled (the read-back once the store was back found CH3
    off). Now it is told at once and journaled, once, as soon as the store takes it."""
    for command in ("VOLT 15,(@3)", "CURR 0.2,(@3)", "OUTP 1,(@3)"):
        front_panel.write(command)
    store = _RefusesBreaches(db_path)
    gw = Gateway(config, store, clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        req = (await gw.submit(run.id, "psu", "VOLT 1,(@1)")).request
        assert req is not None
        alerts: list[dict[str, Any]] = []
        async with gw.subscribe() as queue:
            store.armed = True
            try:
                await grant_all(gw, req.id, olga)
            finally:
                while not queue.empty():
                    alerts.append(queue.get_nowait())
        assert front_panel.query("OUTP? (@3)").strip() == "0"
        assert [a for a in alerts if a.get("alert") == "envelope_breach"], alerts
        assert gw.get_request(req.id).status is Status.EXECUTED
        assert not _breaches(gw, run.id)
        store.armed = False
        for _ in range(50):  # bounded: the sweeps write it once the store takes it
            if _breaches(gw, run.id):
                break
            await asyncio.sleep(0.1)
        for _ in range(10):  # and never twice
            await asyncio.sleep(0.1)
        found = _breaches(gw, run.id)
        assert len(found) == 1, found
        assert found[0].request_id == req.id
        assert gw.verify_journal().intact
    finally:
        await gw.close()
        gw.store.close()


class _RefusesMemories(SqliteStore):
    """Armed, refuses the table of stored states (memories.py): the rest works."""

    armed = False

    def _refuse(self, table: str) -> None:
        if self.armed and table == "memories":
            raise StoreError("memories: database is locked (injected)")

    def kv_items(self, table: str) -> list[tuple[str, dict[str, Any]]]:
        self._refuse(table)
        return super().kv_items(table)

    def kv_put(self, table: str, key: str, data: dict[str, Any]) -> None:
        self._refuse(table)
        super().kv_put(table, key, data)


async def test_a_recalled_breach_is_made_safe_when_the_store_refuses_a_save_after_it(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, pete: Principal, front_panel: Any) -> None:
    """Slot 3 saved through the gateway, then again at the front panel: CH2 at 20 V, on.
    ``*RCL 3;*SAV 4`` is approved: the recall puts CH2 at 20 V, on, above its 12 V limit;
    then the save's store work (dropping what slot 4 held) is refused. The store error
    ended the lane's job before its read-back: no safe action, CH2 left on at 20 V until
    a sweep judged the request once the store took its outcome. Now the save is not sent,
    and the read-back on the same turn switches CH2 off before the call returns."""
    store = _RefusesMemories(db_path)
    gw = Gateway(config, store, clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        save = (await gw.submit(run.id, "psu", "*SAV 3")).request
        assert save is not None
        assert (await grant_all(gw, save.id, olga)).request.status is Status.EXECUTED
        for command in ("VOLT 20,(@2)", "CURR 0.4,(@2)", "OUTP 1,(@2)", "*SAV 3", "*RST"):
            front_panel.write(command)
        sent = await gw.submit(run.id, "psu", "*RCL 3;*SAV 4")
        req = sent.request
        assert req is not None and req.actions[0].unpredictable, sent
        await gw.grant(req.id, olga, ["state"], proposal_hash=req.proposal_hash)
        store.armed = True
        try:
            await gw.grant(req.id, pete, ["setpoint", "output_enable"],
                           proposal_hash=req.proposal_hash)
        except StoreError:
            pass  # the outcome may be unkept: the instrument is what this test reads
        assert front_panel.query("OUTP? (@2)").strip() == "0", "CH2 left on at 20 V"
        store.armed = False
    finally:
        await gw.close()
        gw.store.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[pg.PgCluster]:
    """A server of its own: this test stops it."""
    with pg.start_or_skip() as c:
        yield c


class _DiesAtTheBreach(PostgresStore):
    """The database stops just as a write's envelope breach is journaled."""

    kill: Callable[[], None] | None = None

    def append(self, events: list[Event], durable: bool = True) -> list[Event]:
        if self.kill is not None and any(e.type is EventType.ENVELOPE_BREACH for e in events):
            kill, self.kill = self.kill, None
            kill()
        return super().append(events, durable)


async def test_a_writes_breach_while_postgresql_is_down_is_told_and_journaled_later(
        cluster: pg.PgCluster, config: BenchConfig, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    """The same breach, with PostgreSQL stopping right as it is journaled: told at once,
    CH3 off, and journaled once the server is back (with the write's outcome, reconciled)."""
    for command in ("VOLT 15,(@3)", "CURR 0.2,(@3)", "OUTP 1,(@3)"):
        front_panel.write(command)
    store = _DiesAtTheBreach(cluster.new_database(), pool_timeout=1.0)
    gw = Gateway(config, store, clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        req = (await gw.submit(run.id, "psu", "VOLT 1,(@1)")).request
        assert req is not None
        alerts: list[dict[str, Any]] = []
        async with gw.subscribe() as queue:
            store.kill = lambda: cluster.stop("immediate")
            with contextlib.suppress(StoreError):  # the outcome's commit: a 503
                await grant_all(gw, req.id, olga)
            while not queue.empty():
                alerts.append(queue.get_nowait())
        assert store.kill is None, "the database was never stopped"
        assert front_panel.query("OUTP? (@3)").strip() == "0"
        assert [a for a in alerts if a.get("alert") == "envelope_breach"], alerts
        cluster.start()
        found: list[Event] = []
        for _ in range(150):  # bounded: the sweeps once the server is back
            with contextlib.suppress(GatewayError):
                found = _breaches(gw, run.id)
                if found and gw.get_request(req.id).status is not Status.EXECUTING:
                    break
            await asyncio.sleep(0.1)
        assert len(found) == 1 and found[0].request_id == req.id, found
        assert gw.get_request(req.id).status is Status.EXECUTED
    finally:
        if not cluster.running:
            cluster.start()
        await gw.close()
        gw.store.close()
