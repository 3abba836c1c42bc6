"""A heartbeat term with two gateways on one PostgreSQL store (bench_gate/terms.py): a run
created on bench A whose client talks only to bench B. B's gateway hears it and says so
through the store, so A (which keeps the term) never closes a run whose client is there;
once it goes silent, A closes it, and B's pending write of it never runs (B's simulator's
own port)."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal

import pytest

from bench_gate.errors import TransitionError
from bench_gate.gateway import Gateway
from bench_gate.models import RunStatus, Status
from sim_instruments import SimBenchThread
from tests import pg
from tests.core.test_leases import until
from tests.core.test_multibench import OLGA, PETE, SCRIPT, benches, gateway, panel, sims, stop

pg_cluster = pg.pg_cluster
__all__ = ["benches", "pg_cluster", "sims"]  # fixtures, used by name

TERM = 2


async def test_a_run_made_on_a_and_heard_through_b_closes_only_when_silent(
        benches: tuple[str, Gateway, Gateway],
        sims: tuple[SimBenchThread, SimBenchThread]) -> None:
    _, a, b = benches
    run = a.create_run(SCRIPT, "agent", "B's supply", heartbeat_seconds=TERM)
    held = (await b.submit(run.id, "psu", "VOLT 3,(@1)")).request
    assert held is not None and held.bench == "bench-b"
    for _ in range(8):  # two terms, heard through B only
        await asyncio.sleep(TERM / 4)
        b.heartbeat(run.id, SCRIPT)
    assert a.get_run(run.id).status is RunStatus.ACTIVE, "A closed a run B heard from"
    assert b.get_request(held.id).status is Status.PENDING
    # Silent now: A closes it within the term, plus B's write interval and a sweep.
    await until(lambda: b.get_request(held.id).status is Status.CANCELLED, TERM + 2.0)
    assert a.get_run(run.id).status is RunStatus.CLOSED
    with pytest.raises(TransitionError):
        await b.grant(held.id, OLGA, ["setpoint"], proposal_hash=held.proposal_hash)
    with pytest.raises(TransitionError, match="client gone"):
        b.heartbeat(run.id, SCRIPT)  # B's heartbeat after: it reopens nothing
    assert a.store.kv_items("run_terms") == []
    res = panel(sims[1])
    try:
        assert Decimal(res.query("VOLT? (@1)")) == 0
    finally:
        res.close()


async def test_a_write_waiting_for_bs_lane_when_a_closes_its_run_writes_nothing(
        benches: tuple[str, Gateway, Gateway],
        sims: tuple[SimBenchThread, SimBenchThread]) -> None:
    """Its last approval committed it ``executing`` while B's lane was busy; meanwhile A
    closed the run (its term ran out). B's lane turn reads the run again (last_moment):
    failed, nothing written, seen on B's simulator's own port."""
    _, a, b = benches
    run = a.create_run(SCRIPT, "agent", heartbeat_seconds=TERM)
    req = (await b.submit(run.id, "psu", "VOLT 2,(@1);:CURR 0.4,(@1);:OUTP ON,(@1)")
           ).request
    assert req is not None
    await b.grant(req.id, OLGA, ["setpoint"], proposal_hash=req.proposal_hash)
    lane = b.instruments["psu"].lane
    holding = asyncio.ensure_future(lane.run(lambda link: asyncio.sleep(TERM + 1.5)))
    await asyncio.sleep(0.1)
    granting = asyncio.ensure_future(b.grant(req.id, PETE, ["output_enable"],
                                             proposal_hash=req.proposal_hash))
    await until(lambda: b.get_request(req.id).status is Status.EXECUTING, 5)
    await until(lambda: a.get_run(run.id).status is RunStatus.CLOSED, TERM + 1.0)
    await holding
    final = (await granting).request
    assert final.status is Status.FAILED, (final.status, final.outcome)
    assert "closed" in (final.outcome or "")
    res = panel(sims[1])
    try:
        assert int(res.query("OUTP? (@1)")) == 0
        assert Decimal(res.query("VOLT? (@1)")) == 0
    finally:
        res.close()



async def test_a_gone_keepers_term_is_kept_by_the_bench_that_holds_the_write(
        pg_cluster: pg.PgCluster, sims: tuple[SimBenchThread, SimBenchThread]) -> None:
    """A run made on A (which keeps its term) with a write held on B; A goes away with its
    client (one PC). B keeps the term from when it finds A gone: the run closes a term
    later, and the write never runs (B's simulator's own port). Before, nobody closed it and
    a grant on B executed it for nobody."""
    url = pg_cluster.new_database()
    a = await gateway(url, "bench-a", sims[0])
    b = await gateway(url, "bench-b", sims[1])
    try:
        run = a.create_run(SCRIPT, "agent", "B's supply", heartbeat_seconds=TERM)
        held = (await b.submit(run.id, "psu", "VOLT 3,(@1)")).request
        assert held is not None and held.bench == "bench-b"
        await stop(a)  # its claim released: gone
        await until(lambda: b.get_request(held.id).status is Status.CANCELLED, TERM + 2.0)
        assert b.get_run(run.id).status is RunStatus.CLOSED
        with pytest.raises(TransitionError):
            await b.grant(held.id, OLGA, ["setpoint"], proposal_hash=held.proposal_hash)
    finally:
        await stop(b)
    res = panel(sims[1])
    try:
        assert Decimal(res.query("VOLT? (@1)")) == 0
    finally:
        res.close()


async def test_a_restarted_keepers_run_waits_on_b_until_its_client_is_heard(
        pg_cluster: pg.PgCluster, sims: tuple[SimBenchThread, SimBenchThread]) -> None:
    """A restarts (its client may have gone with it) while B holds the run's write; a grant
    on B waits until the client is heard again (by A since its restart, or by B within the
    term), and runs then."""
    url = pg_cluster.new_database()
    a = await gateway(url, "bench-a", sims[0])
    b = await gateway(url, "bench-b", sims[1])
    term = 3
    try:
        run = a.create_run(SCRIPT, "agent", "B's supply", heartbeat_seconds=term)
        held = (await b.submit(run.id, "psu", "VOLT 3,(@1)")).request  # B hears it
        heard_on_b = time.monotonic()
        assert held is not None
        await asyncio.sleep(1.5)
        a.heartbeat(run.id, SCRIPT)  # the last word before A's restart
        await stop(a)
        a = await gateway(url, "bench-a", sims[0])  # closes the run a term from now
        # B's own hearing (the submit) a term old; A's new term not yet over.
        await asyncio.sleep(heard_on_b + term + 0.2 - time.monotonic())
        assert b.get_run(run.id).status is RunStatus.ACTIVE
        done = await b.grant(held.id, OLGA, ["setpoint"], proposal_hash=held.proposal_hash)
        assert done.request.status is Status.APPROVED, done.request.outcome
        await asyncio.sleep(0.6)
        assert b.get_request(held.id).status is Status.APPROVED
        a.heartbeat(run.id, SCRIPT)  # heard by the keeper since its restart
        await until(lambda: b.get_request(held.id).status is Status.EXECUTED, 3.0)
    finally:
        await stop(a)
        await stop(b)
    res = panel(sims[1])
    try:
        assert Decimal(res.query("VOLT? (@1)")) == 3
    finally:
        res.close()
