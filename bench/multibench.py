"""Two gateways (benches) sharing one PostgreSQL database: the time from a grant on A to
the execution on B (the owner), and read throughput with the shared store.

    python bench/multibench.py [--db postgresql://…] [--grants 30] [--seconds 5]

Without ``--db`` a throwaway PostgreSQL cluster is started (Debian's binaries), as the
tests do. Each bench has its own simulated PSU served on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_gate.config import default_config
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Role, Status
from bench_gate.store import open_store
from sim_instruments import SimBenchThread

OLGA = Principal(name="olga", role=Role.OPERATOR)
SCRIPT = Principal(name="script", role=Role.REQUESTER)


async def gateway(url: str, bench: str, sim: SimBenchThread) -> Gateway:
    config = default_config(sim.psu_port, sim.dmm_port)
    config.bench = bench
    gw = Gateway(config, open_store(url))
    await gw.start()
    return gw


async def measure(url: str, grants: int, seconds: float) -> None:
    with SimBenchThread() as sim_a, SimBenchThread() as sim_b:
        a = await gateway(url, "bench-a", sim_a)
        b = await gateway(url, "bench-b", sim_b)
        try:
            run = b.create_run(SCRIPT, "script")
            latencies = []
            for i in range(grants):
                req = (await b.submit(run.id, "psu", f"VOLT {(i % 20) / 4},(@1)")).request
                assert req is not None
                started = time.perf_counter()
                result = await a.grant(req.id, OLGA, ["setpoint"],
                                       proposal_hash=req.proposal_hash)
                assert result.request.status is Status.EXECUTED, result.message
                latencies.append(time.perf_counter() - started)
            latencies.sort()
            print(f"grant on A -> executed on B ({grants} grants): "
                  f"p50 {statistics.median(latencies) * 1000:.0f} ms, "
                  f"max {latencies[-1] * 1000:.0f} ms")

            async def reader(gw: Gateway, count: list[int], end: float) -> None:
                r = gw.create_run(SCRIPT, "script")
                while time.perf_counter() < end:
                    await gw.submit(r.id, "psu", "VOLT? (@1)")
                    count[0] += 1

            for clients in (1, 4):
                count = [0]
                end = time.perf_counter() + seconds
                await asyncio.gather(*(reader(gw, count, end) for gw in (a, b)
                                       for _ in range(clients)))
                print(f"reads, {clients} client(s) per bench on 2 benches: "
                      f"{count[0] / seconds:.0f} q/s in all")
        finally:
            await a.close()
            await b.close()
            a.store.close()
            b.store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="a PostgreSQL URL (default: a throwaway cluster)")
    parser.add_argument("--grants", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    with ExitStack() as stack:
        url = args.db
        if url is None:
            from tests.pg import PgCluster

            cluster = stack.enter_context(PgCluster.create())
            url = cluster.new_database()
        asyncio.run(measure(url, args.grants, args.seconds))


if __name__ == "__main__":
    main()
