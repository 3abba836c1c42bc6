"""10,000 pending takeover requests, each with a parked waiter: threads, memory, list time.

    python bench/parked.py [--count 10000]
    python bench/parked.py --count 10000 --list-only   # listing only, in seconds

``--list-only`` holds 200 real requests, then files copies of them (new ids, the same
handoffs) straight into the store up to ``--count``: the listing figures at full size
without minutes of live snapshots (no waiters, so no memory or thread figures).

Listing times are the median of five calls, with their range. Timed beside them in the
same run: the first page as the API's list items (what a person's page waits for), the
whole-document read (what internal callers that change requests use), and a floor: the
same page's rows read from SQLite and nothing else (no parse), so a loaded machine shows
as a slow floor. Goals (issue 20): all pending in under 200 ms, the first page of 50 in
under 10 ms, at most 8 KiB of memory per parked request.

A pending request holds no thread and no task of its own: waiters await an event keyed by
request id, and expiry is one sweeper comparing times. The instrument here is pyvisa-sim
in-process (the packaged YAML), so the figure measures the gateway, not socket I/O.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from bench_gate.api._schemas import takeover_out
from bench_gate.config import BenchConfig, InstrumentConfig
from bench_gate.core import new_id
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Role, Run, Status
from bench_gate.store import RequestSort, SqliteStore
from bench_gate.store._queries import page as page_query
from sim_instruments import PSU_RESOURCE, bench_yaml_path

T = TypeVar("T")


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


CPU: list[float] = []  # the process's CPU time of the last timed calls, in ms


def timed(fn: Callable[..., T], *args: Any, runs: int = 5, **kwargs: Any
          ) -> tuple[list[float], T]:
    """The wall times of ``runs`` calls, in ms, sorted, and the last result; their CPU
    times in ``CPU`` (what other processes' load on a shared machine moves least)."""
    times = []
    CPU.clear()
    for _ in range(runs):
        t, c = time.perf_counter(), time.process_time()
        result = fn(*args, **kwargs)
        times.append((time.perf_counter() - t) * 1000)
        CPU.append((time.process_time() - c) * 1000)
    return sorted(times), result


def shown(times: list[float], goal: float | None = None) -> str:
    median = statistics.median(times)
    verdict = "" if goal is None else (f"  goal < {goal:g} ms: "
                                       + ("met" if median < goal else "NOT met"))
    return f"{median:8.1f} ms  (range {times[0]:.1f}-{times[-1]:.1f}){verdict}"


def report_listing(gw: Gateway, count: int) -> None:
    listed, pending = timed(gw.list_requests, status=Status.PENDING, limit=count)
    listed_cpu = statistics.median(CPU)
    page, first_page = timed(gw.list_requests, status=Status.PENDING, limit=50, runs=21)
    api, _ = timed(lambda: [takeover_out(r) for r in
                            gw.list_requests(status=Status.PENDING, limit=50)], runs=21)
    whole, _ = timed(gw.store.list_requests, status=Status.PENDING, limit=count)
    sql, args, _, _ = page_query(Status.PENDING, None, None, None, RequestSort.NEWEST, count,
                                 0, gw.store._listed)
    floor, _ = timed(gw.store._read, sql, args)
    print(f"pending requests         {len(pending)} (first page {len(first_page)})")
    print(f"list all pending         {shown(listed, 200 if count >= 10_000 else None)}  "
          f"{statistics.median(listed) * 1000 / count:.0f} us each; CPU {listed_cpu:.0f} ms")
    print(f"first page of 50         {shown(page, 10)}")
    print(f"  as the API's list items{shown(api)}")
    print(f"floor: the rows alone    {shown(floor)}  (SQLite, no parse)")
    print(f"whole documents          {shown(whole)}  (internal callers)")


async def opened(tmp: str, count: int) -> tuple[Gateway, list[Run]]:
    """A gateway on the in-process pyvisa-sim supply, and the runs ``count`` requests need:
    the default quota lets one requester park 200 (limits.pending_requests), so 10,000
    parked requests come from 50 scripts, each with its own run."""
    config = BenchConfig(instruments=[InstrumentConfig(
        name="psu", resource=PSU_RESOURCE, profile="e36312a",
        backend=f"{bench_yaml_path()}@sim")])
    gw = Gateway(config, SqliteStore(Path(tmp) / "parked.db"))
    await gw.start()
    per_script = config.limits.pending_requests
    return gw, [gw.create_run(Principal(name=f"script-{n}", role=Role.REQUESTER), "script")
                for n in range(-(-count // per_script))]


async def list_only(count: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        gw, runs = await opened(tmp, count)
        per_script = gw.config.limits.pending_requests
        real = []
        for i in range(min(count, per_script)):
            held = (await gw.submit(runs[0].id, "psu", f"VOLT {(i % 600) / 100},(@1)")).request
            assert held is not None
            real.append(held)
        gw.store.pending_check = None  # copies, not filings: the quota counted the real ones
        for i in range(len(real), count):
            copy = real[i % len(real)].model_copy(update={
                "id": new_id("tk"), "run_id": runs[i // per_script].id})
            gw.store.create_request(copy, [])
        report_listing(gw, count)
        await gw.close()
        gw.store.close()


async def main(count: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        gw, runs = await opened(tmp, count)
        per_script = gw.config.limits.pending_requests
        await gw.submit(runs[0].id, "psu", "*IDN?")  # opens the lane's thread
        # and, fold_seconds later, the journal's (one per gateway: it folds reads' records)
        await asyncio.sleep(gw.config.journal.fold_seconds + 0.5)
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
        report_listing(gw, count)
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        await gw.close()
        gw.store.close()
    print(f"parked waiters           {len(waiters)}")
    print(f"threads before / after   {threads_before} / {threads_after}  "
          f"(added {threads_after - threads_before})")
    per = (rss_after - rss_before) * 1024 / count
    print(f"memory added (RSS)       {rss_after - rss_before:.1f} MiB "
          f"({per:.2f} KiB per parked request)  goal <= 8 KiB: "
          + ("met" if per <= 8 else "NOT met"))
    print(f"time to create           {created:.1f} s ({count / created:.0f} requests/s, "
          "each with a live snapshot)")
    assert threads_after == threads_before, "parked requests must not add threads"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--list-only", action="store_true",
                        help="the listing figures only, from copies of 200 held requests")
    args = parser.parse_args()
    asyncio.run(list_only(args.count) if args.list_only else main(args.count))
