"""Several gateways sharing one PostgreSQL store, each owning its own bench's instruments."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from typing import Any

import pytest
import pyvisa

from bench_gate.config import ChannelLimits, default_config
from bench_gate.errors import BenchTaken, InvalidInput, PermissionDenied, TransitionError
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Role, Status
from bench_gate.store import open_store
from sim_instruments import SimBenchThread
from tests import pg

pg_cluster = pg.pg_cluster


@pytest.fixture
def sims() -> Iterator[tuple[SimBenchThread, SimBenchThread]]:
    with SimBenchThread() as a, SimBenchThread() as b:
        yield a, b


def panel(sim: SimBenchThread) -> Any:
    """The front panel (``SIM:PANEL``): the gateway's instrument lock does not cover it."""
    rm = pyvisa.ResourceManager("@py")
    res = rm.open_resource(sim.psu_resource_name, read_termination="\n",
                           write_termination="\n", timeout=2000)
    res.write("SIM:PANEL")
    return res


async def gateway(url: str, bench: str, sim: SimBenchThread) -> Gateway:
    config = default_config(sim.psu_port, sim.dmm_port)
    config.bench = bench
    gw = Gateway(config, open_store(url))
    await gw.start()
    return gw


async def stop(gw: Gateway) -> None:
    await gw.close()
    gw.store.close()


@pytest.fixture
async def benches(pg_cluster: pg.PgCluster, sims: tuple[SimBenchThread, SimBenchThread]
                  ) -> AsyncIterator[tuple[str, Gateway, Gateway]]:
    url = pg_cluster.new_database()
    a = await gateway(url, "bench-a", sims[0])
    b = await gateway(url, "bench-b", sims[1])
    yield url, a, b
    await stop(a)
    await stop(b)


SCRIPT = Principal(name="script-b", role=Role.REQUESTER)
OLGA = Principal(name="olga", role=Role.OPERATOR)
PETE = Principal(name="pete", role=Role.OPERATOR)


async def test_grant_on_a_executes_on_the_owner_b(benches: tuple[str, Gateway, Gateway],
                                                  sims: tuple[SimBenchThread, SimBenchThread]
                                                  ) -> None:
    _, a, b = benches
    run = b.create_run(SCRIPT, "script")
    req = (await b.submit(run.id, "psu", "VOLT 2.5,(@1)")).request
    assert req is not None and req.bench == "bench-b"
    queue = a.list_requests(status=Status.PENDING)
    assert [r.id for r in queue] == [req.id], "A's console sees B's pending request"
    started = time.perf_counter()
    result = await a.grant(req.id, OLGA, ["setpoint"], proposal_hash=req.proposal_hash)
    elapsed = time.perf_counter() - started
    assert result.request.status is Status.EXECUTED, result.message
    assert elapsed < 1.0, f"owner executed {elapsed:.2f} s after the grant"
    pa, pb = panel(sims[0]), panel(sims[1])
    assert Decimal(pb.query("VOLT? (@1)")) == Decimal("2.5")
    assert Decimal(pa.query("VOLT? (@1)")) == 0, "A never touches its own PSU for B"
    pa.close()
    pb.close()


async def test_owner_down_then_back_executes_once(pg_cluster: pg.PgCluster,
                                                  sims: tuple[SimBenchThread, SimBenchThread]
                                                  ) -> None:
    url = pg_cluster.new_database()
    a = await gateway(url, "bench-a", sims[0])
    b = await gateway(url, "bench-b", sims[1])
    run = b.create_run(SCRIPT, "script")
    req = (await b.submit(run.id, "psu", "VOLT 3,(@2)")).request
    assert req is not None
    await stop(b)  # the owner goes away
    try:
        started = time.perf_counter()
        result = await a.grant(req.id, OLGA, ["setpoint"], proposal_hash=req.proposal_hash)
        assert time.perf_counter() - started < 1.0, "a grant for a bench that is down is " \
            "recorded at once"
        assert result.request.status is Status.APPROVED
        assert "bench 'bench-b' is not running" in result.message
        pb = panel(sims[1])
        assert Decimal(pb.query("VOLT? (@2)")) == 0
        b = await gateway(url, "bench-b", sims[1])  # back: rechecks, then executes
        done = await b.wait(req.id, timeout=10)
        assert done.status is Status.EXECUTED
        assert Decimal(pb.query("VOLT? (@2)")) == 3
        completions = [e for e in b.store.journal(run.id, limit=1000)
                       if e.type.value == "step_completed"]
        assert len(completions) == 1
        pb.close()
    finally:
        await stop(a)
        await stop(b)


async def test_owner_rechecks_a_remote_grant(benches: tuple[str, Gateway, Gateway],
                                             sims: tuple[SimBenchThread, SimBenchThread]
                                             ) -> None:
    _, a, b = benches
    run = b.create_run(SCRIPT, "script")
    req = (await b.submit(run.id, "psu", "VOLT 4,(@3)")).request
    assert req is not None
    pb = panel(sims[1])
    pb.write("VOLT 1.0,(@3)")  # the knob on bench B turns
    result = await a.grant(req.id, OLGA, ["setpoint"], proposal_hash=req.proposal_hash)
    assert result.request.status is Status.STALE
    assert Decimal(pb.query("VOLT? (@3)")) == 1
    pb.close()


async def test_racing_decisions_from_two_gateways(benches: tuple[str, Gateway, Gateway]
                                                  ) -> None:
    _, a, b = benches
    run = b.create_run(SCRIPT, "script")
    for i in range(4):
        req = (await b.submit(run.id, "psu", f"VOLT {i / 4},(@1)")).request
        assert req is not None
        outcomes = await asyncio.gather(a.grant(req.id, OLGA, ["setpoint"],
                                                proposal_hash=req.proposal_hash),
                                        b.deny(req.id, PETE, "no", proposal_hash=req.proposal_hash),
                                        return_exceptions=True)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(errors) <= 1 and all(isinstance(e, TransitionError) for e in errors)
        final = b.get_request(req.id)
        for _ in range(50):
            if final.status in (Status.EXECUTED, Status.DENIED):
                break
            await asyncio.sleep(0.05)
            final = b.get_request(req.id)
        assert final.status in (Status.EXECUTED, Status.DENIED)
        decided = [e for e in b.store.journal(run.id, limit=10_000) if e.request_id == req.id
                   and e.type.value in ("step_completed", "takeover_denied")]
        assert len(decided) == 1


async def test_remote_changes_reach_the_other_consoles(benches: tuple[str, Gateway, Gateway]
                                                       ) -> None:
    _, a, b = benches
    async with a.subscribe() as events:
        run = b.create_run(SCRIPT, "script")
        req = (await b.submit(run.id, "psu", "VOLT 1,(@1)")).request
        assert req is not None
        seen = await asyncio.wait_for(events.get(), timeout=5)
        while seen.get("id") != req.id:
            seen = await asyncio.wait_for(events.get(), timeout=5)
        assert seen["bench"] == "bench-b" and seen["status"] == "pending"


async def test_a_console_judges_another_benchs_request_with_its_profile(
        benches: tuple[str, Gateway, Gateway]) -> None:
    _, a, b = benches
    run = b.create_run(SCRIPT, "script")
    req = (await b.submit(run.id, "psu", "VOLT 1,(@1)")).request
    assert req is not None
    seen_from_a = a.get_request(req.id)
    assert not a.owns(seen_from_a) and b.owns(seen_from_a)
    assert a.profile_for(seen_from_a).name == "e36312a"
    assert seen_from_a.handoff["bench"] == "bench-b"


async def test_a_deciding_gateway_applies_the_owners_rules(
        benches: tuple[str, Gateway, Gateway],
        sims: tuple[SimBenchThread, SimBenchThread]) -> None:
    """B limits CH2 to 3 V and wants two people to energize; A allows 12 V and one person.
    Decisions made on A for B's requests follow B's rules, published through the store."""
    _, a, b = benches
    b.config.envelope["psu"][2] = ChannelLimits(voltage=Decimal(3), current=Decimal("0.5"))
    b.config.policy.two_person_output_enable = True
    b.registry.claim()  # publish the new rules now rather than at the next heartbeat
    run = b.create_run(SCRIPT, "script")
    req = (await b.submit(run.id, "psu", "VOLT 1,(@2)")).request
    assert req is not None
    with pytest.raises(InvalidInput, match="above the bench limit of 3"):
        await a.grant(req.id, OLGA, ["setpoint"], edits={"CH2.voltage": "10"},
                      proposal_hash=req.proposal_hash)
    both = (await b.submit(run.id, "psu", "VOLT 1,(@1);:OUTP ON,(@1)")).request
    assert both is not None
    with pytest.raises(PermissionDenied, match="two different people"):
        await a.grant(both.id, OLGA, ["setpoint", "output_enable"],
                      proposal_hash=both.proposal_hash)
    pb = panel(sims[1])
    assert Decimal(pb.query("VOLT? (@2)")) == 0 and Decimal(pb.query("OUTP? (@1)")) == 0
    pb.close()


async def test_a_second_live_gateway_with_the_same_bench_name_refuses_to_start(
        pg_cluster: pg.PgCluster, sims: tuple[SimBenchThread, SimBenchThread]) -> None:
    url = pg_cluster.new_database()
    first = await gateway(url, "bench-a", sims[0])
    try:
        with pytest.raises(BenchTaken, match="already served by a live gateway"):
            await gateway(url, "bench-a", sims[1])
    finally:
        await stop(first)
    second = await gateway(url, "bench-a", sims[1])  # the name is free once the first stops
    await stop(second)
