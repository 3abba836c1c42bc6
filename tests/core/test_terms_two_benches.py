"""A heartbeat term with two gateways on one PostgreSQL store (bench_gate/terms.py): a run
created on bench A whose client talks only to bench B. B's gateway hears it and says so
through the store, so A (which keeps the term) never closes a run whose client is there;
once it goes silent, A closes it, and B's pending write of it never runs (B's simulator's
own port)."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest

from bench_gate.errors import TransitionError
from bench_gate.gateway import Gateway
from bench_gate.models import RunStatus, Status
from sim_instruments import SimBenchThread
from tests import pg
from tests.core.test_leases import until
from tests.core.test_multibench import OLGA, PETE, SCRIPT, benches, panel, sims

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
