"""The PostgreSQL store going away in the middle of the corridor: a server of this module's
own, stopped and started again by the tests. What the instrument really did is read on the
simulator's own port."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bench_gate.config import BenchConfig
from bench_gate.errors import GatewayError, StoreError
from bench_gate.gateway import Gateway
from bench_gate.instruments import Link, PyvisaLink
from bench_gate.models import EventType, Principal, Status
from bench_gate.store import PostgresStore, open_store
from tests import pg
from tests.conftest import Clock
from tests.core.test_emergency_stop import energize
from tests.core.test_leases import LEASE
from tests.core.test_plans import active_plan
from tests.core.test_stop_holes import off_within


@pytest.fixture(scope="module")
def cluster() -> Iterator[pg.PgCluster]:
    """A server of its own: these tests stop it."""
    with pg.start_or_skip() as c:
        yield c


class _StoreDiesOnWrite:
    """The supply's link: once armed, the first write starting with ``prefix`` reaches the
    instrument, and then the database stops (as a restart of PostgreSQL, or a cable pulled,
    right after the write went out and before its outcome is committed)."""

    def __init__(self, inner: Link, prefix: str, kill: Callable[[], None]) -> None:
        self.inner = inner
        self.prefix = prefix
        self.kill = kill
        self.armed = False
        self.writes: list[str] = []
        self.killed = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def write(self, command: str) -> None:
        self.writes.append(command)
        self.inner.write(command)
        if self.armed and command.startswith(self.prefix):
            self.armed = False
            self.kill()
            self.killed.set()

    def query(self, command: str, *args: Any) -> str:
        return self.inner.query(command, *args)

    def close(self) -> None:
        self.inner.close()


def _status(gw: Gateway, request_id: str) -> Status | None:
    with contextlib.suppress(GatewayError):  # the store may still be coming back
        return gw.get_request(request_id).status
    return None


async def _until(check: Callable[[], bool], seconds: float) -> bool:
    for _ in range(int(seconds / 0.1)):
        if check():
            return True
        await asyncio.sleep(0.1)
    return check()


async def test_a_write_whose_outcome_commit_was_lost_is_reconciled_once_the_store_is_back(
        cluster: pg.PgCluster, config: BenchConfig, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    """The grant is committed and ``VOLT 2.5,(@1)`` reaches the supply; then PostgreSQL
    stops, so the outcome's commit fails. The request stayed ``executing`` for good (only a
    restart of the gateway reconciled executing requests). Now, once the store is back,
    the sweeper judges it from a read-back, as after a crash: executed (reconciled), the
    command sent once."""
    url = cluster.new_database()
    psu = config.instrument("psu")
    assert psu is not None
    link = _StoreDiesOnWrite(PyvisaLink(psu), "VOLT 2.5", lambda: cluster.stop("immediate"))
    gw = Gateway(config, PostgresStore(url, pool_timeout=1.0), links={"psu": link},
                 clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        req = (await gw.submit(run.id, "psu", "VOLT 2.5,(@1)")).request
        assert req is not None and req.status is Status.PENDING
        link.armed = True
        told = ""
        try:
            await gw.grant(req.id, olga, list(req.required), proposal_hash=req.proposal_hash)
        except StoreError as exc:  # the store is gone: a 503 to the approver
            told = exc.message
        assert "nothing from this call was acknowledged" not in told, told
        assert link.killed.is_set(), "the database was never stopped"
        assert float(front_panel.query("VOLT? (@1)")) == pytest.approx(2.5)
        cluster.start()
        done = await _until(lambda: _status(gw, req.id) not in (None, Status.EXECUTING), 15)
        after = gw.get_request(req.id)
        assert done, f"left {after.status.value} with nobody executing it"
        assert after.status is Status.EXECUTED, after.outcome
        assert after.receipt is not None and after.receipt.reconciled
        assert "reconciled" in (after.outcome or "")
        assert [w for w in link.writes if w.startswith("VOLT 2.5")] == ["VOLT 2.5,(@1)"]
        assert float(front_panel.query("VOLT? (@1)")) == pytest.approx(2.5)
    finally:
        if not cluster.running:
            cluster.start()
        await gw.close()
        gw.store.close()


def _queue(gw: Gateway) -> None:
    """A console polling the queue: a store call on the gateway's event loop."""
    with contextlib.suppress(GatewayError):
        gw.list_requests(status=Status.PENDING)


async def test_the_emergency_stop_never_waits_for_a_store_that_is_down(
        cluster: pg.PgCluster, config: BenchConfig, clock: Clock, olga: Principal,
        front_panel: Any) -> None:
    """PostgreSQL is down and a console asks for the queue (the gateway calls the store
    on its event loop): the STOP pressed right after it switched CH1 off only once that
    call gave up, after the pool's 5 s, and every store call of the stop itself (keeping
    it, cancelling, journaling) waited 5 s more on the loop. A store known to be down
    now fails at once: CH1 goes off within the stop's own time."""
    url = cluster.new_database()
    gw = Gateway(config, open_store(url), clock=clock)  # the default pool_timeout: 5 s
    await gw.start()
    loop = asyncio.get_running_loop()

    def press() -> float | None:
        loop.call_soon_threadsafe(_queue, gw)
        stop = asyncio.run_coroutine_threadsafe(gw.emergency_stop(olga, "test"), loop)
        off = off_within(front_panel, 4.5, (1,))
        stop.result(120)
        return off

    try:
        front_panel.write("VOLT 1,(@1)")
        front_panel.write("OUTP ON,(@1)")
        cluster.stop("immediate")
        off = await asyncio.to_thread(press)
        assert off is not None and off < 1.5, f"CH1 went off {off} s after the STOP"
        assert "psu" in gw.stopped()
    finally:
        if not cluster.running:
            cluster.start()
        await gw.close()
        gw.store.close()


async def test_a_lost_clients_lease_runs_out_while_the_store_is_down(
        cluster: pg.PgCluster, config: BenchConfig, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    """CH1 on with a lease; PostgreSQL goes away, and so does the client (the same network
    blip). The lease sweep read the leases from the store each time, failed, and tried
    again: CH1 stayed on for as long as the database was away. The leases last read are
    run out from memory meanwhile: CH1 off within the term, and its journal event and the
    lease's end are written once the store is back (the safe action sent once)."""
    config.policy.lease_seconds = LEASE
    config.policy.on_client_lost = "safe"
    config.policy.watch_seconds = 0  # the lease alone, not the envelope watch
    url = cluster.new_database()
    gw = Gateway(config, open_store(url), clock=clock)
    await gw.start()
    try:
        async with gw.subscribe() as events:
            run_id = await energize(gw, script, olga)
            assert front_panel.query("OUTP? (@1)").strip() == "1"
            assert [lease["run_id"] for lease in gw.leases()] == [run_id]
            cluster.stop("immediate")
            off = await asyncio.to_thread(off_within, front_panel, LEASE + 6, (1,))
            assert off is not None, "CH1 left on after its client's lease ran out"
            assert "client_lost" in await _alerts(events), "nobody told, store away"
        cluster.start()
        assert await _until(lambda: _lease_ended(gw, run_id), 15), "the lease never ended"
        expired = [e for e in gw.journal(run_id, limit=1000)
                   if e.type is EventType.LEASE_EXPIRED]
        assert len(expired) == 1, expired
        assert front_panel.query("OUTP? (@1)").strip() == "0"
    finally:
        if not cluster.running:
            cluster.start()
        await gw.close()
        gw.store.close()


def _lease_ended(gw: Gateway, run_id: str) -> bool:
    with contextlib.suppress(GatewayError):
        return all(lease["run_id"] != run_id for lease in gw.leases())
    return False


async def test_a_breach_made_safe_while_the_store_is_down_is_told_and_journaled_later(
        cluster: pg.PgCluster, config: BenchConfig, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    """CH1 on; PostgreSQL goes away; the panel puts CH1's current over its 1 A limit. The
    envelope watch switched CH1 off, then journaled the breach before telling anyone: the
    journal failed, so no console was told why CH1 went off, and the breach was never
    journaled. Now the alert goes at once and the event is journaled, once, when the
    store is back."""
    url = cluster.new_database()
    gw = Gateway(config, open_store(url), clock=clock)
    await gw.start()
    try:
        async with gw.subscribe() as events:
            await energize(gw, script, olga)
            cluster.stop("immediate")
            front_panel.write("CURR 1.5,(@1)")
            off = await asyncio.to_thread(off_within, front_panel, 5.0, (1,))
            assert off is not None, "CH1 left on over its limit"
            assert "envelope_breach" in await _alerts(events), "nobody told, store away"
        cluster.start()
        assert await _until(lambda: _breaches(gw, config.bench) == 1, 15)
    finally:
        if not cluster.running:
            cluster.start()
        await gw.close()
        gw.store.close()


def _breaches(gw: Gateway, bench: str) -> int:
    with contextlib.suppress(GatewayError):
        return sum(e.type is EventType.ENVELOPE_BREACH
                   for e in gw.store.journal(f"bench:{bench}", limit=1000))
    return -1


async def _alerts(events: asyncio.Queue[dict[str, Any]]) -> set[str]:
    """The alerts told so far (a moment to arrive: bounded)."""
    told: set[str] = set()
    for _ in range(20):
        while not events.empty():
            told.add(str(events.get_nowait().get("alert")))
        await asyncio.sleep(0.05)
    return told


class _DiesAtTheStepsRecord(PostgresStore):
    """The database stops just as a plan step's unattended-step record is written."""

    kill: Callable[[], None] | None = None

    def kv_put(self, table: str, key: str, data: dict[str, Any]) -> None:
        if table == "auto_steps" and self.kill is not None:
            kill, self.kill = self.kill, None
            kill()
        super().kv_put(table, key, data)


async def test_a_plan_step_its_requester_was_told_failed_never_runs_later(
        cluster: pg.PgCluster, config: BenchConfig, clock: Clock, script: Principal,
        olga: Principal, pete: Principal, front_panel: Any) -> None:
    """Inside a plan, ``VOLT 1.5,(@1)``: its approved request was committed, then the store
    went away before the step's record, and the requester got a 503 ("nothing from this
    call was acknowledged"). Once the store was back the sweeper found the approved request
    and wrote 1.5 V, unattended, to a requester that had been told it failed. The step is
    now committed last: a 503 means nothing runs."""
    url = cluster.new_database()
    store = _DiesAtTheStepsRecord(url, pool_timeout=1.0)
    gw = Gateway(config, store, clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script", goal="IV curve")
        await active_plan(gw, run.id, olga, pete)
        front_panel.write("VOLT 1,(@1)")
        assert (await gw.submit(run.id, "psu", "CURR 0.5,(@1)")).status == "executed"
        store.kill = lambda: cluster.stop("immediate")
        with pytest.raises(StoreError):
            await gw.submit(run.id, "psu", "VOLT 1.5,(@1)")
        cluster.start()
        assert await _until(lambda: _listed(gw) is not None, 15)
        for _ in range(30):  # bounded: several sweeps, each runs what is approved
            await asyncio.sleep(0.1)
        assert [r.message for r in _listed(gw) or [] if r.message == "VOLT 1.5,(@1)"] == []
        assert float(front_panel.query("VOLT? (@1)")) == pytest.approx(1.0)
    finally:
        if not cluster.running:
            cluster.start()
        await gw.close()
        gw.store.close()


def _listed(gw: Gateway) -> list[Any] | None:
    with contextlib.suppress(GatewayError):
        return gw.list_requests()
    return None
