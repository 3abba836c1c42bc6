"""Several gateways sharing one PostgreSQL store, each owning its own bench's instruments."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from typing import Any

import pytest
import pyvisa

from bench_gate.config import default_config
from bench_gate.errors import TransitionError
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
    rm = pyvisa.ResourceManager("@py")
    return rm.open_resource(sim.psu_resource_name, read_termination="\n",
                            write_termination="\n", timeout=2000)


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
    result = await a.grant(req.id, OLGA, ["setpoint"])
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
        result = await a.grant(req.id, OLGA, ["setpoint"])
        assert result.request.status is Status.APPROVED
        assert "bench 'bench-b' executes it" in result.message
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
    result = await a.grant(req.id, OLGA, ["setpoint"])
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
        outcomes = await asyncio.gather(a.grant(req.id, OLGA, ["setpoint"]),
                                        b.deny(req.id, PETE, "no"),
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
