"""From the last grant to the instrument write: how long an approved write waits.

    python bench/grant_write.py [--requests 200] [--sim-in-process]

The simulated bench is served on 127.0.0.1 in its own process (``python -m sim_instruments
serve``: a LAN instrument, as on a bench) and the gateway runs in this process on its own
SQLite store. Each round holds one setpoint write, then an operator grants it; the link to
the supply records when the write leaves for the instrument and how long each query before
it waited for its answer. Reported: grant call -> the write on the wire (p50, p99, max),
split into the instrument's answers (the live recheck's queries, from send to answer) and
the rest (the gateway's own work and its commit, overlapped with those queries where they
run together); and grant call -> the grant returning with the request executed (the
read-back after the write too). The goal (issue: speed) is a p50 under 5 ms.

``--sim-in-process`` serves the simulator on a thread of this process instead (as before
session 35): its Python then competes with the gateway's for the GIL.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_gate.config import default_config
from bench_gate.gateway import Gateway
from bench_gate.instruments import AsyncLink, Link, open_link
from bench_gate.models import Principal, Role, Status
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread

try:
    from ._procs import free_port, process
except ImportError:
    from _procs import free_port, process


class Stamped:
    """The supply's own link, noting when each write of a watched command leaves."""

    def __init__(self, inner: Link | AsyncLink) -> None:
        self.inner = inner
        self.watch: str | None = None
        self.sent_at: float | None = None
        self.waited = 0.0  # seconds the queries before the watched write waited for answers

    def __getattr__(self, name: str) -> object:  # opens, connected, ... as the link has them
        return getattr(self.inner, name)

    async def write(self, command: str) -> None:
        if command == self.watch and self.sent_at is None:
            self.sent_at = time.perf_counter()
        result = self.inner.write(command)
        if asyncio.iscoroutine(result):
            await result

    async def query(self, command: str, extra_seconds: float = 0.0) -> str:
        start = time.perf_counter()
        result = self.inner.query(command, extra_seconds)
        answer = await result if asyncio.iscoroutine(result) else result
        if self.sent_at is None:
            self.waited += time.perf_counter() - start
        return answer

    async def close(self) -> None:
        result = self.inner.close()
        if asyncio.iscoroutine(result):
            await result


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextmanager
def simulator(in_process: bool) -> Iterator[tuple[int, int]]:
    """The simulated bench's (psu, dmm) ports: its own process, or a thread of this one."""
    if in_process:
        with SimBenchThread() as sim:
            yield sim.psu_port, sim.dmm_port
        return
    psu, dmm = free_port(), free_port()
    root = Path(__file__).resolve().parent.parent
    with process([sys.executable, "-m", "sim_instruments", "serve", "--psu-port", str(psu),
                  "--dmm-port", str(dmm)], cwd=root) as sim:
        assert sim.stdout is not None
        if not sim.stdout.readline():  # it prints a line once it serves
            raise RuntimeError(f"the simulator exited with {sim.wait()}")
        yield psu, dmm


async def main(rounds: int, in_process: bool) -> None:
    with simulator(in_process) as (psu_port, dmm_port), tempfile.TemporaryDirectory() as tmp:
        config = default_config(psu_port, dmm_port)
        psu = next(i for i in config.instruments if i.name == "psu")
        link = Stamped(open_link(psu))
        gw = Gateway(config, SqliteStore(Path(tmp) / "grant.db"),
                     links={"psu": link})  # type: ignore[dict-item]
        await gw.start()
        script = Principal(name="script", role=Role.REQUESTER)
        olga = Principal(name="olga", role=Role.OPERATOR)
        run = gw.create_run(script, "script")
        to_wire: list[float] = []
        to_done: list[float] = []
        answers: list[float] = []
        for i in range(rounds):
            volts = f"{1 + (i % 40) / 10:.1f}"
            held = (await gw.submit(run.id, "psu", f"VOLT {volts},(@2)")).request
            assert held is not None and held.status is Status.PENDING
            link.watch, link.sent_at, link.waited = held.actions[0].canonical, None, 0.0
            t0 = time.perf_counter()
            done = (await gw.grant(held.id, olga, ["setpoint"],
                                   proposal_hash=held.proposal_hash)).request
            t1 = time.perf_counter()
            assert done.status is Status.EXECUTED, done.outcome
            assert link.sent_at is not None, "the write never left"
            to_wire.append((link.sent_at - t0) * 1000)
            to_done.append((t1 - t0) * 1000)
            answers.append(link.waited * 1000)
        await gw.close()
        gw.store.close()
    where = "a thread of this process" if in_process else "its own process"
    print(f"rounds                        {rounds} (the simulator in {where})")
    rest = [w - a for w, a in zip(to_wire, answers, strict=True)]
    for name, xs in (("grant -> write on the wire", to_wire),
                     ("  of which instrument answers", answers),
                     ("  of which the rest", rest),
                     ("grant -> executed (read back)", to_done)):
        print(f"{name:<30}p50 {statistics.median(xs):6.2f} ms   p99 {pct(xs, 0.99):6.2f} ms"
              f"   max {max(xs):6.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--sim-in-process", action="store_true",
                        help="serve the simulator on a thread of this process")
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.sim_in_process))
