"""Two gateways (two benches) on one PostgreSQL store: a request of bench A decided
through both at the very same moment, by two operators: both approvals count once each
(the request's version is a compare-and-set), it runs exactly once, on A only, and the
journal stays one intact chain. The supply's real state on the simulator's own port."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

from bench_gate.config import InstrumentConfig, default_config
from bench_gate.errors import GatewayError
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status, TakeoverRequest
from bench_gate.store import PostgresStore
from sim_instruments import SimBenchThread, SimServedThread
from tests import pg
from tests.conftest import own_port

pg_cluster = pg.pg_cluster


async def test_two_gateways_granting_at_once_on_postgresql_run_it_once(
        sim: SimBenchThread, pg_cluster: pg.PgCluster, script: Principal, olga: Principal,
        pete: Principal) -> None:
    url = pg_cluster.new_database()
    a_config = default_config(sim.psu_port, sim.dmm_port)
    a_config.bench = "bench-a"
    with SimServedThread("dp832") as other:
        b_config = default_config(sim.psu_port, sim.dmm_port)
        b_config.bench = "bench-b"
        b_config.instruments = [InstrumentConfig(name="aux", resource=other.resource_name,
                                                 profile="dp832")]
        b_config.envelope = {}
        a, b = Gateway(a_config, PostgresStore(url)), Gateway(b_config, PostgresStore(url))
        await a.start()
        await b.start()
        try:
            for round_ in range(5):
                run = a.create_run(script, "script", goal=f"round {round_}")
                volts = f"{round_ + 1}"
                held = (await a.submit(run.id, "psu",
                                       f"VOLT {volts},(@1);:OUTP ON,(@1)")).request
                assert held is not None and held.status is Status.PENDING

                async def decide(gw: Gateway, who: Principal, kind: str,
                                 req: TakeoverRequest) -> Any:
                    try:
                        return await gw.grant(req.id, who, [kind],
                                              proposal_hash=req.proposal_hash)
                    except GatewayError as exc:
                        return exc

                got = await asyncio.gather(decide(a, olga, "setpoint", held),
                                           decide(b, pete, "output_enable", held))
                after = a.get_request(held.id)
                for _ in range(100):
                    if after.status not in (Status.PENDING, Status.APPROVED, Status.EXECUTING):
                        break
                    await asyncio.sleep(0.1)
                    after = a.get_request(held.id)
                assert after.status is Status.EXECUTED, (got, after.status, after.outcome)
                assert sorted(x.kind.value for x in after.valid_approvals()) == [
                    "output_enable", "setpoint"]
                started = [e for e in a.store.request_events(held.id, "step_started", 10)]
                assert len(started) == 1, started
                with own_port(sim.psu_resource_name, panel=True) as psu:
                    assert Decimal(psu.query("VOLT? (@1)")) == Decimal(volts)
                    psu.write("OUTP OFF,(@1)")
            report = a.verify_journal()
            assert report.intact, report.summary()
        finally:
            await b.close()
            await a.close()
            b.store.close()
            a.store.close()
