"""Benches on one PostgreSQL store, on different hosts: a resource string names an
instrument on its own host only (``TCPIP0::192.168.1.20::5025::SOCKET`` on two lab
subnets, ``ASRL/dev/ttyUSB0::INSTR`` on two PCs). A gateway took another bench's emergency
stop or client lease as its own when that bench's gateway was down and one of its own
instruments had the same resource string: the stop moved off bench B (B's supply no
longer stopped when B came back) and stopped A's supply nobody stopped; the lease was run
out on A's supply (A's DUT switched off) and deleted (B's output left on with no lease).
A record of another bench is this gateway's only when it was made on this host."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from bench_gate.config import BenchConfig
from bench_gate.core import resource_key
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.store import open_store
from tests import pg
from tests.conftest import Clock

pg_cluster = pg.pg_cluster

OTHER_HOST = "bench-b-pc"


def _bench(config: BenchConfig, name: str) -> BenchConfig:
    return config.model_copy(update={"bench": name})


async def test_another_hosts_stop_is_never_taken_over(
        pg_cluster: pg.PgCluster, config: BenchConfig, clock: Clock, script: Principal,
        olga: Principal) -> None:
    url = pg_cluster.new_database()
    b = Gateway(_bench(config, "bench-b"), open_store(url), clock=clock)
    await b.start()
    try:
        await b.emergency_stop(olga, "api", "psu")
        (key, record), = [(k, r) for k, r in b.store.kv_items("stops") if k.endswith("/psu")]
        # Bench B's gateway runs on its own PC: its psu has the same resource string as
        # bench A's, and is another supply.
        b.store.kv_put("stops", key, {**record, "host": OTHER_HOST,
                                      "idn": str(record["idn"]).replace("MY0", "MY9")})
    finally:
        await b.close()
        b.store.close()
    a = Gateway(_bench(config, "bench-a"), open_store(url), clock=clock)
    await a.start()  # bench B's gateway is down meanwhile (its PC restarting)
    try:
        assert a.stopped() == {}, "bench A shows a stop nobody pressed on bench A"
        kept = dict(a.store.kv_items("stops"))
        assert kept.get("bench-b/psu", {}).get("host") == OTHER_HOST, kept
        run = a.create_run(script, "script")
        held = await a.submit(run.id, "psu", "VOLT 1,(@1)")
        assert held.status == "pending", held
    finally:
        await a.close()
        a.store.close()


async def test_another_hosts_lease_is_never_run_out_here(
        pg_cluster: pg.PgCluster, config: BenchConfig, clock: Clock,
        front_panel: Any) -> None:
    url = pg_cluster.new_database()
    cfg = _bench(config, "bench-a")
    cfg.policy.lease_seconds = 1
    cfg.policy.on_client_lost = "safe"
    front_panel.write("VOLT 1,(@1)")
    front_panel.write("OUTP ON,(@1)")  # bench A's DUT, on at its own panel
    a = Gateway(cfg, open_store(url), clock=clock)
    await a.start()
    try:
        psu = cfg.instrument("psu")
        assert psu is not None
        # A lease bench B's gateway (down now) keeps on its own supply, on its own PC.
        lease = {"run_id": "run-b", "instrument": "psu", "bench": "bench-b",
                 "resource": resource_key(psu.resource), "idn": None, "channels": [1],
                 "host": OTHER_HOST}
        a.store.kv_put("leases", "run-b/bench-b/psu", lease)
        assert a.leases() == [], "bench A takes bench B's lease as its own"
        for _ in range(30):  # bounded: more than the lease's term and two lease sweeps
            await asyncio.sleep(0.1)
        assert front_panel.query("OUTP? (@1)").strip() == "1", "A's DUT switched off"
        assert a.store.kv_get("leases", "run-b/bench-b/psu") == lease
    finally:
        await a.close()
        a.store.close()


@pytest.mark.parametrize("host", [None, "same"])
async def test_a_renamed_benchs_lease_on_this_host_is_still_run_out(
        pg_cluster: pg.PgCluster, config: BenchConfig, clock: Clock, front_panel: Any,
        host: str | None) -> None:
    """The other side: a bench renamed on this PC (nobody serves the old name) still runs
    out the lease its old name took here (tests/core/test_lease_renamed.py)."""
    url = pg_cluster.new_database()
    cfg = _bench(config, "bench-a")
    cfg.policy.lease_seconds = 1
    cfg.policy.on_client_lost = "safe"
    front_panel.write("VOLT 1,(@1)")
    front_panel.write("OUTP ON,(@1)")
    a = Gateway(cfg, open_store(url), clock=clock)
    await a.start()
    try:
        psu = cfg.instrument("psu")
        assert psu is not None
        lease = {"run_id": "run-b", "instrument": "psu", "bench": "old-name",
                 "resource": resource_key(psu.resource), "idn": None, "channels": [1]}
        if host is not None:
            lease["host"] = socket.gethostname()
        a.store.kv_put("leases", "run-b/old-name/psu", lease)
        if host is None:  # kept before leases named their host: nobody's to take
            assert a.leases() == []
            return
        assert [x["instrument"] for x in a.leases()] == ["psu"]
        for _ in range(50):
            if front_panel.query("OUTP? (@1)").strip() == "0":
                break
            await asyncio.sleep(0.1)
        assert front_panel.query("OUTP? (@1)").strip() == "0"
    finally:
        await a.close()
        a.store.close()
