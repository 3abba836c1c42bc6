"""Attacks on the emergency stop (docs/interlocks.md §1): a safe action that would wait for
something, and an output that would come back on around a stop. Every check of the
instrument is made on the simulator's own port."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pyvisa

from bench_gate.config import BenchConfig, InstrumentConfig
from bench_gate.errors import StoreError
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from bench_gate.plans import PlanStatus
from bench_gate.store import SqliteStore, open_store
from sim_instruments import SimBenchThread, SimServedThread
from tests import pg
from tests._http_bench import Bench, start_bench
from tests.conftest import Clock, own_port, served_bench
from tests.core.test_emergency_stop import energize, outputs, panel, switch_on
from tests.core.test_leases import LEASE, plan_and_energize, until
from tests.core.test_plans import active_plan
from tests.instruments.test_dp832 import LIMITS as DP832_LIMITS

#: The busy timeout of the gateway's store in the tests of a locked store below: its writes
#: give up at once (the product's default, 5 s, only made each test wait). That the safe
#: action never waits for the store is proven on the default store, whose writes still wait
#: while the outputs go off: test_the_stop_goes_before_a_waiting_store_write, the breach.
BUSY = 0.2


@pytest.fixture
async def gateway(config: BenchConfig, db_path: Path, clock: Clock) -> AsyncIterator[Gateway]:
    gw = Gateway(config, SqliteStore(db_path, busy_timeout=BUSY), clock=clock)
    await gw.start()
    yield gw
    await gw.close()
    gw.store.close()


@pytest.fixture
async def waiting_gateway(config: BenchConfig, db_path: Path, clock: Clock
                          ) -> AsyncIterator[Gateway]:
    """The gateway on the default store: its writes wait up to 5 s for SQLite's lock."""
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    yield gw
    await gw.close()
    gw.store.close()


def off_within(front_panel: Any, seconds: float, channels: tuple[int, ...] = (1, 2, 3)
               ) -> float | None:
    """Seconds until every output of ``channels`` reads 0 on the simulator's own port, or
    None. Blocking: run it on a thread, so a stalled event loop cannot hide the wait."""
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        if all(front_panel.query(f"OUTP? (@{ch})").strip() == "0" for ch in channels):
            return time.perf_counter() - started
        time.sleep(0.05)
    return None


async def test_stop_does_not_wait_for_a_locked_store(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any,
        db_path: Path) -> None:
    """Another writer holds SQLite's write lock (a backup, a `journal verify`, a stuck
    process): the outputs go off at once, the stop is in force, and it says the store could
    not keep it. It used to wait the store's 5 s busy timeout, then raise with every output
    still on."""
    run_id = await energize(gateway, script, olga)
    front_panel.write("OUTP 1,(@3)")
    waiting = (await gateway.submit(run_id, "psu", "VOLT 3,(@2)")).request
    assert waiting is not None
    other = sqlite3.connect(db_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # the store's write lock, held
        polling = asyncio.ensure_future(asyncio.to_thread(off_within, front_panel, 2.5))
        stop = asyncio.ensure_future(gateway.emergency_stop(olga, "test"))
        off = await polling
        assert off is not None, f"outputs still {outputs(front_panel)} with the store locked"
        done = await asyncio.wait_for(stop, 60)
        assert "store_error" in done and "in force" in done["store_error"]
        assert done["instruments"]["psu"]["read_back"] == {
            "ch1.output": "0", "ch2.output": "0", "ch3.output": "0"}
        assert "psu" in gateway.stopped()
    finally:
        other.execute("ROLLBACK")
        other.close()
    # The store is back: the stop is still in force, nothing energizes until it is cleared.
    other_run = gateway.create_run(Principal(name="bot2"), "script")
    refused = await gateway.submit(other_run.id, "psu", "OUTP 1,(@1)")
    assert refused.status == "refused" and "psu is stopped" in refused.reason
    assert outputs(front_panel) == [0, 0, 0]
    # What the stop could not cancel is cancelled before the stop is cleared.
    assert sorted(gateway.clear_stop(olga)) == ["dmm", "psu"]
    assert gateway.get_request(waiting.id).status is Status.CANCELLED
    assert gateway.stopped() == {}


async def test_a_breach_is_made_safe_while_the_store_is_locked(
        waiting_gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any, db_path: Path) -> None:
    """CH1 on inside a standing plan; the panel puts its current limit above the envelope
    while another writer holds the store. The watch ended the plans over CH1 before it sent
    the safe action, and ending them waited for the store, then raised: CH1 stayed on,
    check after check. Now the channel goes off at once; the plan that could not be ended
    cannot switch it on again (the instrument is held stopped until a person clears it).
    On the default store (5 s): a watch that ended the plans first would be 5 s late."""
    gateway = waiting_gateway
    run = gateway.create_run(script, "script", goal="sweep")
    plan_id = await active_plan(gateway, run.id, olga, pete)
    for message in ("CURR 0.5,(@1)", "VOLT 0.5,(@1)", "OUTP ON,(@1)"):
        assert (await gateway.submit(run.id, "psu", message)).status == "executed", message
    other = sqlite3.connect(db_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # the store's write lock, held
        front_panel.write("CURR 1.5,(@1)")
        off = await asyncio.to_thread(off_within, front_panel, 3.5, (1,))  # watch: 1 s
        assert off is not None, "CH1 left on, over its limit, while the store was locked"
        # The hook's store write times out (5 s): the supply is held stopped.
        await until(lambda: "psu" in gateway.stopped(), 10)
    finally:
        other.execute("ROLLBACK")
        other.close()
    front_panel.write("CURR 0.5,(@1)")  # back inside: only a person may switch it on again
    again = await gateway.submit(run.id, "psu", "OUTP ON,(@1)")
    assert again.status == "refused" and "could not end the plans" in again.reason, again
    assert front_panel.query("OUTP? (@1)").strip() == "0"
    assert gateway.clear_stop(olga) == ["psu"]  # what could not be ended ends first
    assert gateway.get_plan(plan_id).status is PlanStatus.REVOKED
    again = await gateway.submit(run.id, "psu", "OUTP ON,(@1)")
    assert again.status in ("pending", "refused"), again  # a person decides
    assert front_panel.query("OUTP? (@1)").strip() == "0"


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    yield from start_bench(tmp_path)


@pytest.mark.parametrize("door", ["HTTP API", "socket door"])
def test_the_doors_stop_at_once_while_a_store_write_waits(bench: Bench, door: str) -> None:
    """Another writer holds SQLite's lock and one of the gateway's own writes waits for it
    on a worker thread (the sweeper's beat does, every sweep), holding the store: every read
    on the event loop (the HTTP door's token, the socket door's) waited behind it, up to
    the 5 s busy timeout, before the stop could even start. Reads now see the last commit
    at once."""
    switch_on(bench)
    store = bench.server.running.gateway.store
    other = sqlite3.connect(bench.db, isolation_level=None)
    host, port = bench.server.running.doors["psu"]
    rm = pyvisa.ResourceManager("@py")
    script: Any = rm.open_resource(f"TCPIP0::{host}::{port}::SOCKET", read_termination="\n",
                                   write_termination="\n", timeout=15000)
    try:
        other.execute("BEGIN IMMEDIATE")
        waiting = threading.Thread(target=put_waiting, args=(store,))
        waiting.start()  # holds the store while SQLite makes it wait
        time.sleep(0.5)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            off = pool.submit(off_within, _Panel(bench), 2.5)
            if door == "HTTP API":
                with bench.http("bot") as h:
                    pressed = pool.submit(h.post, "/v1/bench/stop", json={})
                    assert off.result() is not None, f"still on: {panel(bench)}"
                    let_go(other)  # off while the write still waited (up to 5 s): done
                    assert pressed.result().status_code == 200
            else:
                script.write("GATE:STOP")
                assert off.result() is not None, f"still on: {panel(bench)}"
                let_go(other)
        waiting.join(timeout=30)
    finally:
        let_go(other)
        other.close()
        script.close()
    assert panel(bench) == [0, 0, 0]


def let_go(other: sqlite3.Connection) -> None:
    """The other writer lets go of SQLite's lock (if it still holds it)."""
    if other.in_transaction:
        other.execute("ROLLBACK")


def put_waiting(store: Any) -> None:
    """A write of the gateway's store that waits for SQLite's lock, then fails."""
    with contextlib.suppress(StoreError):
        store.kv_put("probe", "waits", {})


class _Panel:
    """``off_within``'s front panel for a served bench: the simulator's own port."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench

    def query(self, text: str) -> str:
        return self.bench.psu(text)


async def test_stop_after_a_dropped_connection_while_the_store_is_locked(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any,
        db_path: Path) -> None:
    """The supply's connection dropped (a timeout, a restart of the instrument): the lane
    takes the instrument lock again before its next job and journals the take. With the
    store locked, that journal waited 5 s and raised on the lane, before the safe action:
    the stop raised, CH1 stayed on. The safe action now goes first; the take is journaled
    off the loop, and a failed journal never fails the take."""
    await energize(gateway, script, olga)
    await gateway.instrument("psu").lane.link.close()
    other = sqlite3.connect(db_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        polling = asyncio.ensure_future(asyncio.to_thread(off_within, front_panel, 2.5))
        stop = asyncio.ensure_future(gateway.emergency_stop(olga, "test"))
        off = await polling
        assert off is not None, f"outputs still {outputs(front_panel)}"
        done = await asyncio.wait_for(stop, 60)
        assert done["instruments"]["psu"]["errors"] == []
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert gateway.instrument_lock("psu").locked


@pytest.fixture
def supply_sim() -> Iterator[SimServedThread]:
    with SimServedThread("dp832") as served:
        yield served


@pytest.mark.parametrize("spelling", [("TCPIP0::", "TCPIP::"), ("127.0.0.1", "2130706433")])
async def test_a_stopped_instrument_under_another_name_stays_stopped(
        sim: SimBenchThread, supply_sim: SimServedThread, db_path: Path, clock: Clock,
        script: Principal, olga: Principal, spelling: tuple[str, str]) -> None:
    """The DP832 (not lockable) is on the bench twice: ``dp832`` and ``other``, its resource
    spelled another way (another board spelling; the address as one number), so nothing
    at the instrument tells the two connections apart. STOP on ``dp832``; ``OUTP CH1,ON``
    to ``other``, approved, switched CH1 on. A stop now covers every name of the same
    instrument: the same resource however spelled, or the same ``*IDN?`` answer."""
    cfg = served_bench(sim, "dp832", supply_sim, "dp832", DP832_LIMITS)
    cfg.instruments.append(InstrumentConfig(
        name="other", resource=supply_sim.resource_name.replace(*spelling), profile="dp832"))
    gw = Gateway(cfg, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        await gw.emergency_stop(olga, "test", "dp832")
        run = gw.create_run(script, "script")
        sent = await gw.submit(run.id, "other", "OUTP CH1,ON")
        if sent.request is not None:
            done = await gw.grant(sent.request.id, olga, list(sent.request.required),
                                  proposal_hash=sent.request.proposal_hash)
            assert done.request.status is Status.FAILED, done.request.outcome
            assert "the same instrument) is stopped" in (done.request.outcome or "")
        else:
            assert sent.status == "refused" and "is stopped" in sent.reason
        with own_port(supply_sim.resource_name) as port:
            assert port.query("OUTP? CH1") == "OFF"
    finally:
        await gw.close()
        gw.store.close()


pg_cluster = pg.pg_cluster


@pytest.mark.parametrize("spelling", [("", ""), ("127.0.0.1", "2130706433")])
async def test_a_stop_holds_on_every_bench_of_the_store(
        pg_cluster: pg.PgCluster, supply_sim: SimServedThread, script: Principal,
        olga: Principal, spelling: tuple[str, str]) -> None:
    """Two benches on one PostgreSQL store, each its own gateway, both reaching the one
    DP832 (not lockable; bench B's address spelled alike, or as one number). STOP on bench
    A; ``OUTP CH1,ON`` approved on bench B switched CH1 on. A stop now keeps which
    instrument it is (resource, ``*IDN?``), and every bench on the store refuses it."""
    url = pg_cluster.new_database()
    with SimBenchThread() as sim_a, SimBenchThread() as sim_b:
        gws = []
        for bench, sim in (("bench-a", sim_a), ("bench-b", sim_b)):
            cfg = served_bench(sim, "dp832", supply_sim, "dp832", DP832_LIMITS)
            if bench == "bench-b":
                cfg.instruments[-1].resource = supply_sim.resource_name.replace(*spelling)
            cfg.bench = bench
            gw = Gateway(cfg, open_store(url))
            await gw.start()
            gws.append(gw)
        a, b = gws
        try:
            await a.emergency_stop(olga, "test", "dp832")
            run = b.create_run(script, "script")
            sent = await b.submit(run.id, "dp832", "OUTP CH1,ON")
            if sent.request is not None:
                done = await b.grant(sent.request.id, olga, list(sent.request.required),
                                     proposal_hash=sent.request.proposal_hash)
                assert done.request.status is Status.FAILED, done.request.outcome
                assert "is stopped" in (done.request.outcome or "")
            else:
                assert sent.status == "refused" and "is stopped" in sent.reason
            with own_port(supply_sim.resource_name) as port:
                assert port.query("OUTP? CH1") == "OFF"
        finally:
            for gw in gws:
                await gw.close()
                gw.store.close()


async def test_a_lost_clients_lease_is_made_safe_while_the_store_is_locked(
        gateway: Gateway, open_client: Callable[..., Any], olga: Principal,
        front_panel: Any, db_path: Path) -> None:
    """A script energized CH1 inside a plan and is killed while another writer holds the
    store. The lease sweep ended the plans over CH1 before the safe action, and that waited
    for the store, then raised, every sweep: CH1 stayed on. It is now switched off, and the
    plan that could not be ended holds the supply stopped. (The bound is generous: the
    socket door's own close of the run still waits the store's busy timeout on the loop.)"""
    gateway.config.policy.lease_seconds = LEASE
    gateway.config.policy.on_client_lost = "safe"
    gateway.config.policy.watch_seconds = 0  # the lease alone, not the envelope watch
    client = open_client("psu")
    await plan_and_energize(gateway, client, olga)
    assert front_panel.query("OUTP? (@1)").strip() == "1"
    other = sqlite3.connect(db_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        polling = asyncio.ensure_future(asyncio.to_thread(
            off_within, front_panel, LEASE + 9, (1,)))
        client.close()  # the script is gone
        assert await polling is not None, "CH1 left on after its lease ran out"
        # The plan's end waits for the store, then fails: the supply is held stopped.
        await until(lambda: "psu" in gateway.stopped(), 5.5)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert front_panel.query("OUTP? (@1)").strip() == "0"
    assert "psu" in gateway.stopped()


@pytest.mark.parametrize("dropped", [False, True], ids=["stop", "after a dropped connection"])
async def test_the_stop_goes_before_a_waiting_store_write(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any, dropped: bool) -> None:
    """The order the stop tests of a locked store above rely on, on the default store (its
    writes wait up to 5 s for SQLite's lock): the outputs go off while the stop's store
    write still waits, not after it gave up. The other writer lets go once they are off."""
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    other = sqlite3.connect(db_path, isolation_level=None)
    try:
        await energize(gw, script, olga)
        if dropped:
            await gw.instrument("psu").lane.link.close()
        other.execute("BEGIN IMMEDIATE")  # the store's write lock, held
        polling = asyncio.ensure_future(asyncio.to_thread(off_within, front_panel, 2.5))
        stop = asyncio.ensure_future(gw.emergency_stop(olga, "test"))
        off = await polling
        assert off is not None, f"outputs still {outputs(front_panel)} with the store locked"
        let_go(other)
        done = await asyncio.wait_for(stop, 60)
        assert done["instruments"]["psu"]["errors"] == []
        assert "psu" in gw.stopped() and outputs(front_panel) == [0, 0, 0]
    finally:
        let_go(other)
        other.close()
        await gw.close()
        gw.store.close()
