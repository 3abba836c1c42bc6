"""``python bench/proxy.py --one-process``: the socket door's benchmark as it was first
written, everything in one process (the client, the simulator, the relay or the gateway):
kept so that the figures measured this way stay comparable. ``bench/proxy.py`` without the
flag runs each in its own process, as production does.

How fast is a query through the socket door? One run, four paths, the same question.

    python bench/proxy.py --one-process [-n 2000]

Each path asks ``VOLT? (@1)`` of the simulated E36312A, sequentially, from one pyvisa
client, and reports queries per second and latency p50/p99, as a ratio to the relay floor:

  direct        pyvisa-sim in this process: no socket at all (the floor of the floor)
  relay         a minimal asyncio byte relay in front of the SimBench raw-socket PSU
  gateway       the gateway's socket door (Gateway + read log + SQLite journal + lane +
                pyvisa-py)
  pyvisa-proxy  the PyPI package pyvisa-proxy serving the same YAML (a peer)

It also prints where the gateway's time goes: one ``Gateway.submit`` in-process, the lane
round trip alone, one read's record in the read log, and its share of a fold into the
journal (done off the read's path, on the journal's thread).

``--what-if-no-journal`` also measures the door with reads not journaled at all (not the
product): the gap between it and the door is what journaling a read costs.

``--what-if-no-chain`` also measures the door with the journal as it was before its hash
chain (issue 17), alternating with the real one ``--rounds`` times on the loop ``serve``
runs on, and prints what the chain costs: the median of the rounds' throughput ratios, each
pair measured back to back (which goes first alternates), so a noisy machine disturbs both
alike.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pyvisa

from bench_gate.auth import Tokens
from bench_gate.config import default_config
from bench_gate.gateway import Gateway
from bench_gate.models import Event, EventType, Principal, Role
from bench_gate.proxy import start_doors
from bench_gate.store import READ_LOG_TABLE, SqliteStore

if __package__:
    from ._relay import start_relay
else:  # run as a script, or imported by bench/proxy.py run as one
    from _relay import start_relay
from sim_instruments import (
    PSU_RESOURCE,
    SimBenchThread,
    bench_yaml_path,
    open_fresh_resource_manager,
)

T = TypeVar("T")
QUERY = "VOLT? (@1)"
PROXY_START_ATTEMPTS = 20


class LoopThread:
    """An event loop in a daemon thread, for the servers under test."""

    def __init__(self, factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop
                 ) -> None:
        self.loop = factory()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name="loop")
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def thread_cpu() -> dict[str, float]:
    """CPU seconds each live thread of this process has used, by thread name."""
    used: dict[str, float] = {}
    for thread in threading.enumerate():
        with contextlib.suppress(OSError, OverflowError, TypeError):
            clock = time.pthread_getcpuclockid(thread.ident or 0)
            used[thread.name] = time.clock_gettime(clock)
    return used


def measure(query: Callable[[], str], n: int) -> dict[str, float]:
    """q/s and latency, and the CPU each thread used per query (µs): everything shares one
    process and one GIL, so a query's wall time is about the sum of the threads' CPU, and
    that split moves less with the machine's load than the wall time does."""
    for _ in range(min(100, n)):
        query()
    lat = []
    before = thread_cpu()
    start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        query()
        lat.append(time.perf_counter() - t0)
    total = time.perf_counter() - start
    after = thread_cpu()
    lat.sort()
    out = {"qps": n / total, "p50": statistics.median(lat) * 1e3,
           "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3}
    for name, used in after.items():
        role = _ROLES.get(name.split(" ")[0].split("_")[0], "other")
        out[f"cpu:{role}"] = out.get(f"cpu:{role}", 0.0) + (used - before.get(name, 0.0)) / n * 1e6
    return out


#: Thread names (up to the first space or '_') -> what the thread is, for the CPU split.
_ROLES = {"MainThread": "client", "sim-bench": "simulator", "journal": "fold",
          "loop": "loop"}


def socket_client(rm: pyvisa.ResourceManager, port: int) -> Any:
    return rm.open_resource(f"TCPIP0::127.0.0.1::{port}::SOCKET", read_termination="\n",
                            write_termination="\n", timeout=5000)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_pyvisa_proxy(tmp: Path) -> tuple[subprocess.Popen[bytes] | None, Any, str]:
    """pyvisa-proxy's server in a subprocess serving a copy of the same YAML, and a client."""
    try:
        import pyvisa_proxy  # noqa: F401
    except ImportError:
        return None, None, "not installed (pip install pyvisa-proxy)"
    yaml = tmp / "bench.yaml"
    shutil.copyfile(bench_yaml_path(), yaml)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyvisa_proxy", "--port", str(port), "--backend", f"{yaml}@sim"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    last = ""
    for _ in range(PROXY_START_ATTEMPTS):
        if proc.poll() is not None:
            err = (proc.stderr.read() if proc.stderr else b"").decode(errors="replace")
            return None, None, f"server exited: {err.strip().splitlines()[-1:]}"
        try:
            rm = pyvisa.ResourceManager(f"127.0.0.1:{port}@proxy")
            res = rm.open_resource(PSU_RESOURCE, read_termination="\n",
                                   write_termination="\n", timeout=5000)
            res.query(QUERY)
            return proc, res, ""
        except Exception as exc:  # any failure to come up is reported, not raised
            last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.5)
    proc.terminate()
    return None, None, f"could not connect: {last}"


def loops() -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """asyncio's own loop, and uvloop (what ``bench-gate serve`` runs on) where installed."""
    found: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
        "asyncio": asyncio.new_event_loop}
    with contextlib.suppress(ImportError):
        import uvloop
        found["uvloop"] = uvloop.new_event_loop
    return found


class _NoReadJournal(SqliteStore):
    """What-if only: reads are not journaled (the product always journals them)."""

    def log_read(self, events: list[Event]) -> None:
        return None

    def log_read_rows(self, rows: list[Any]) -> None:
        return None


class _NoChain(SqliteStore):
    """What-if only: the journal without its hash chain, appended as before issue 17 (the
    product always chains): shows what the chain costs a read."""

    def migrate(self) -> None:
        super().migrate()
        with self._tx() as db:
            db.execute("DROP TRIGGER IF EXISTS journal_head_moves")

    def _append(self, db: Any, events: list[Event]) -> None:
        for ev in events:
            cur = db.execute(
                "INSERT INTO journal (run_id, request_id, type, at, data) VALUES (?, ?, ?, ?, ?)",
                (ev.run_id, ev.request_id, ev.type.value, ev.at.isoformat(),
                 json.dumps(ev.data, default=str)))
            ev.seq = int(cur.lastrowid or 0)

    def _fold(self, rows: list[Any], log_id: str, upto: int) -> None:
        with self._fast_lock:
            self._fast.execute("BEGIN IMMEDIATE")
            self._fast.executemany("INSERT INTO journal (run_id, request_id, type, at, data) "
                                   "VALUES (?, ?, ?, ?, ?)", rows)
            self._fast.execute("INSERT INTO kv (tbl, key, data) VALUES (?, ?, ?) ON CONFLICT "
                               "(tbl, key) DO UPDATE SET data = excluded.data",
                               (READ_LOG_TABLE, log_id, json.dumps({"lsn": upto})))
            self._fast.execute("COMMIT")

    def append(self, events: list[Event], durable: bool = True) -> list[Event]:
        if durable or not events:
            with self._tx() as db:
                self._append(db, events)
            return events
        rows = ", ".join(["(?, ?, ?, ?, ?)"] * len(events))
        args = [a for ev in events for a in (
            ev.run_id, ev.request_id, ev.type.value, ev.at.isoformat(),
            json.dumps(ev.data, default=str))]
        with self._fast_lock:
            last = self._fast.execute("INSERT INTO journal (run_id, request_id, type, at, data) "
                                      f"VALUES {rows}", args).lastrowid
        first = int(last or 0) - len(events) + 1
        for i, ev in enumerate(events):
            ev.seq = first + i
        return events


def door_path(loop: LoopThread, sim: SimBenchThread, tmp: Path, n: int, notes: list[str],
              store_class: type[SqliteStore] = SqliteStore) -> dict[str, float]:
    """The socket door as ``bench-gate serve`` runs it, and where its time goes."""
    config = default_config(sim.psu_port, sim.dmm_port)
    for ic in config.instruments:
        ic.socket_port = 0
    store = store_class(tmp / f"bench-{id(loop)}-{store_class.__name__}.db")
    gateway = Gateway(config, store)

    async def up() -> Any:
        await gateway.start()
        return await start_doors(gateway, Tokens(store), config)

    doors = loop.run(up())
    rm = pyvisa.ResourceManager("@py")
    gc = socket_client(rm, doors.addresses["psu"][1])
    result = measure(lambda: gc.query(QUERY), n)
    gc.close()

    # Where the gateway's time goes, in-process on the same loop.
    principal = Principal(name="bench", role=Role.REQUESTER)
    run = gateway.create_run(principal, "script")

    async def timed(fn: Callable[[], Coroutine[Any, Any, Any]], count: int) -> float:
        t0 = time.perf_counter()
        for _ in range(count):
            await fn()
        return (time.perf_counter() - t0) / count * 1e6

    inst = gateway.instrument("psu")
    k = min(n, 1000)
    submit_us = loop.run(timed(lambda: gateway.submit(run.id, "psu", QUERY), k))
    lane_us = loop.run(timed(lambda: inst.lane.run(lambda link: link.query(QUERY)), k))
    def reads(count: int) -> list[list[Event]]:
        return [[Event(run_id=run.id, type=EventType.COMMAND_RECEIVED, data={"message": QUERY}),
                 Event(run_id=run.id, type=EventType.READ_EXECUTED,
                       data={"message": QUERY, "response": "+0"})] for _ in range(count)]

    store.fold_reads()
    batch = reads(k)
    t0 = time.perf_counter()
    for events in batch:
        store.log_read(events)
    log_us = (time.perf_counter() - t0) / k * 1e6
    t0 = time.perf_counter()
    store.fold_reads()
    fold_us = (time.perf_counter() - t0) / k * 1e6
    notes.append(f"in-process on {type(loop.loop).__module__}: Gateway.submit {submit_us:.0f} "
                 f"µs, lane round trip alone {lane_us:.0f} µs, a read's record in the read "
                 f"log {log_us:.0f} µs, its share of a fold {fold_us:.0f} µs (off the path)")

    async def down() -> None:
        await doors.close()
        await gateway.close()

    loop.run(down())
    store.close()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench/proxy.py --one-process",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000, help="queries per path")
    parser.add_argument("--what-if-no-journal", action="store_true",
                        help="also measure the door with reads not journaled (not the product: "
                             "shows what the journal commit costs)")
    parser.add_argument("--what-if-no-chain", action="store_true",
                        help="also measure the door with the journal unchained, alternating "
                             "with the real one (shows what the hash chain costs)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="chained/unchained pairs for --what-if-no-chain (default 5)")
    parser.add_argument("--door-only", action="store_true",
                        help="only the relay floor and the door, on uvloop (for profiling: "
                             "py-spy record -- python bench/proxy.py --door-only -n 20000)")
    args = parser.parse_args(argv)
    n = args.n
    results: dict[str, dict[str, float] | str] = {}
    notes: list[str] = []

    if not args.door_only:
        direct_rm = open_fresh_resource_manager()
        direct = direct_rm.open_resource(PSU_RESOURCE, read_termination="\n",
                                         write_termination="\n")
        results["direct (pyvisa-sim)"] = measure(lambda: direct.query(QUERY), n)

    tmp = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    rm = pyvisa.ResourceManager("@py")
    relays: list[str] = []
    doors: list[str] = []
    pairs: list[tuple[float, float]] = []  # (chained, unchained) q/s, back to back
    with SimBenchThread() as sim:
        for kind, factory in loops().items():
            if args.door_only and kind != list(loops())[-1]:
                continue
            loop = LoopThread(factory)
            relay = loop.run(start_relay(("127.0.0.1", sim.psu_port)))
            rc = socket_client(rm, relay.sockets[0].getsockname()[1])
            relays.append(f"relay ({kind})")
            results[relays[-1]] = measure(functools.partial(rc.query, QUERY), n)
            rc.close()
            loop.loop.call_soon_threadsafe(relay.close)  # the server is the loop's
            doors.append(f"gateway ({kind})")
            results[doors[-1]] = door_path(loop, sim, tmp, n, notes)
            if args.what_if_no_journal:
                results[f"what-if ({kind}, no read journal)"] = door_path(
                    loop, sim, tmp, n, [], _NoReadJournal)
            if args.what_if_no_chain and kind == list(loops())[-1]:
                for r in range(args.rounds):  # which goes first alternates
                    if r % 2:
                        chained = door_path(loop, sim, tmp, n, [])
                        plain = door_path(loop, sim, tmp, n, [], _NoChain)
                    else:
                        plain = door_path(loop, sim, tmp, n, [], _NoChain)
                        chained = door_path(loop, sim, tmp, n, [])
                    pairs.append((chained["qps"], plain["qps"]))
                    results[f"chain {r + 1} ({kind})"] = chained
                    results[f"no chain {r + 1} ({kind})"] = plain
            loop.stop()

    proc, proxy_res, why = (None, None, "--door-only") if args.door_only else \
        start_pyvisa_proxy(tmp)
    if proxy_res is not None:
        try:
            results["pyvisa-proxy"] = measure(lambda: proxy_res.query(QUERY), n)
        except Exception as exc:  # report, don't crash the whole benchmark
            results["pyvisa-proxy"] = f"failed while measuring: {type(exc).__name__}: {exc}"
        with contextlib.suppress(Exception):
            proxy_res.close()
    else:
        results["pyvisa-proxy"] = f"not measured: {why}"
    if proc is not None:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
    shutil.rmtree(tmp, ignore_errors=True)

    def qps(name: str) -> float:
        r = results[name]
        return r["qps"] if isinstance(r, dict) else 0.0

    # The floor is the fastest relay: the gateway is judged against the best a Python
    # socket proxy does on this machine, whichever loop it runs on.
    floor_name = max(relays, key=qps)
    floor = results[floor_name]
    assert isinstance(floor, dict)
    print(f"{n} sequential {QUERY!r} queries per path (python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cpus); floor: {floor_name}\n")
    print(f"{'path':24} {'q/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'p50/floor':>10} "
          f"{'q/s floor/path':>15}")
    for name, r in results.items():
        if isinstance(r, str):
            print(f"{name:24} {r}")
            continue
        print(f"{name:24} {r['qps']:8.0f} {r['p50']:8.3f} {r['p99']:8.3f} "
              f"{r['p50'] / floor['p50']:9.2f}x {floor['qps'] / r['qps']:14.2f}x")
    print("\nCPU per query by thread, µs (the door's own work is in the loop's column):")
    roles = ("client", "loop", "fold", "simulator", "other")
    print(f"{'path':24} " + " ".join(f"{r:>9}" for r in roles) + f" {'sum':>9} {'sum/floor':>10}")
    floor_cpu = sum(v for k, v in floor.items() if k.startswith("cpu:"))
    for name, r in results.items():
        if isinstance(r, str) or "cpu:loop" not in r:
            continue
        total_cpu = sum(v for k, v in r.items() if k.startswith("cpu:"))
        print(f"{name:24} " + " ".join(f"{r.get('cpu:' + k, 0.0):9.1f}" for k in roles)
              + f" {total_cpu:9.1f} {total_cpu / floor_cpu:9.2f}x")
    print()
    for note in notes:
        print(note)
    served = doors[-1]  # the loop ``bench-gate serve`` runs on
    gw = results[served]
    px = results["pyvisa-proxy"]
    if isinstance(gw, dict):
        ratio = floor["qps"] / gw["qps"]
        print(f"goal: {served} within 1.3x of the relay floor: {ratio:.2f}x -> "
              f"{'met' if ratio <= 1.3 else 'NOT met'}")
        if isinstance(px, dict):
            print(f"goal: gateway faster than pyvisa-proxy: {gw['qps']:.0f} vs {px['qps']:.0f} "
                  f"q/s -> {'met' if gw['qps'] > px['qps'] else 'NOT met'}")
    if pairs:
        costs = sorted(1 - chained / plain for chained, plain in pairs)
        cost = statistics.median(costs)
        print(f"goal: the hash chain costs at most 10 % of the door's read throughput: "
              f"{cost * 100:.1f} % (median of {len(pairs)} back-to-back pairs; each: "
              f"{', '.join(f'{c * 100:.1f}' for c in costs)} %) -> "
              f"{'met' if cost <= 0.10 else 'NOT met'}")
