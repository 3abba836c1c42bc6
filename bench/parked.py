"""10,000 pending takeover requests, each with a parked waiter: threads, memory, list time.

    python bench/parked.py [--count 10000]

A pending request holds no thread and no task of its own: waiters await an event keyed by
request id, and expiry is one sweeper comparing times. The instrument here is pyvisa-sim
in-process (the packaged YAML), so the figure measures the gateway, not socket I/O.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import threading
import time
from pathlib import Path

from bench_gate.config import BenchConfig, InstrumentConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Role, Status
from bench_gate.store import SqliteStore
from sim_instruments import PSU_RESOURCE, bench_yaml_path


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def main(count: int) -> None:
    config = BenchConfig(instruments=[InstrumentConfig(
        name="psu", resource=PSU_RESOURCE, profile="e36312a",
        backend=f"{bench_yaml_path()}@sim")])
    with tempfile.TemporaryDirectory() as tmp:
        gw = Gateway(config, SqliteStore(Path(tmp) / "parked.db"))
        await gw.start()
        # The default quota lets one requester park 200 requests (limits.pending_requests),
        # so 10,000 parked requests come from 50 scripts, each with its own run.
        per_script = config.limits.pending_requests
        runs = [gw.create_run(Principal(name=f"script-{n}", role=Role.REQUESTER), "script")
                for n in range(-(-count // per_script))]
        await gw.submit(runs[0].id, "psu", "*IDN?")  # opens the lane's thread
        threads_before = threading.active_count()
        rss_before = rss_mib()
        t0 = time.perf_counter()
        ids = []
        for i in range(count):
            run = runs[i // per_script]
            result = await gw.submit(run.id, "psu", f"VOLT {(i % 600) / 100},(@1)")
            assert result.request is not None
            ids.append(result.request.id)
        created = time.perf_counter() - t0
        waiters = [asyncio.create_task(gw.wait(i, timeout=3600)) for i in ids]
        await asyncio.sleep(0.5)
        threads_after = threading.active_count()
        rss_after = rss_mib()
        t1 = time.perf_counter()
        pending = gw.list_requests(status=Status.PENDING, limit=count)
        listed = time.perf_counter() - t1
        t2 = time.perf_counter()
        first_page = gw.list_requests(status=Status.PENDING, limit=50)
        page = time.perf_counter() - t2
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        await gw.close()
        gw.store.close()
    print(f"pending requests         {len(pending)} (first page {len(first_page)})")
    print(f"parked waiters           {len(waiters)}")
    print(f"threads before / after   {threads_before} / {threads_after}  "
          f"(added {threads_after - threads_before})")
    print(f"memory added (RSS)       {rss_after - rss_before:.1f} MiB "
          f"({(rss_after - rss_before) * 1024 / count:.2f} KiB per parked request)")
    print(f"time to create           {created:.1f} s ({count / created:.0f} requests/s, "
          "each with a live snapshot)")
    print(f"time to list all pending {listed * 1000:.0f} ms; first page of 50 "
          f"{page * 1000:.1f} ms")
    assert threads_after == threads_before, "parked requests must not add threads"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    asyncio.run(main(parser.parse_args().count))
