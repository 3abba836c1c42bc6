"""How fast is a read through the socket door, against a plain relay? Each in its own process.

    python bench/proxy.py [-n 3000] [--rounds 3] [--what-if-no-journal] [--compare DIR]
    python bench/proxy.py --one-process ...   (the first benchmark: everything in one process)
    python bench/proxy.py --spy OUT [-n 12000] (py-spy samples of the gateway's process)

As on a bench, every party runs in its own process: the simulated instruments
(``python -m sim_instruments serve``, standing in for hardware), the server under test, and
a pyvisa-py client asking ``VOLT? (@1)`` sequentially over a raw socket. The servers:

  relay     a minimal byte relay on uvloop, one upstream connection per client: the floor
  gateway   ``bench-gate serve --door psu=PORT`` (what production runs: read log, SQLite
            journal, the envelope watch, the HTTP API idle beside it)
  what-if   (``--what-if-no-journal``) the same door with reads not journaled (not the product)
  compare   (``--compare DIR``) ``bench-gate serve`` from another source tree, e.g. the code
            before a change (``git archive``): alternated with this tree in the same run

Each round measures every server once (the order alternates round to round), so a noisy
machine disturbs them alike; the figures are the medians of the rounds, each ratio taken
against the relay of its own round. Besides q/s and p50, the client reads the CPU time the
server's process used per query (``/proc/PID/task/*/schedstat``): it moves less with the
machine's load than wall time does, and it is what the door itself costs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any

if __package__:  # imported as bench.<script>
    from ._procs import free_port, process
else:  # run as python bench/<script>.py
    from _procs import free_port, process

ROOT = Path(__file__).resolve().parent.parent
QUERY = "VOLT? (@1)"
ONE_PROCESS_FLAGS = {"--one-process", "--what-if-no-chain", "--door-only"}


# --------------------------------------------------------------------------- client process
def cpu_ns(pid: int) -> int:
    """CPU time (ns) every thread of ``pid`` has used so far (Linux schedstat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with suppress(OSError):  # a thread that ended meanwhile
            total += int((task / "schedstat").read_text().split()[0])
    return total


def client_main(port: int, n: int, pids: dict[str, int]) -> None:
    """The client's own process: ``n`` sequential reads; prints q/s, latency, CPU per query."""
    import pyvisa

    rm = pyvisa.ResourceManager("@py")
    res = rm.open_resource(f"TCPIP0::127.0.0.1::{port}::SOCKET", read_termination="\n",
                           write_termination="\n", timeout=5000)
    for _ in range(min(200, n)):
        res.query(QUERY)
    lat = []
    cpu0 = {k: cpu_ns(p) for k, p in pids.items()}
    own0 = time.process_time()
    start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        res.query(QUERY)
        lat.append(time.perf_counter() - t0)
    wall = time.perf_counter() - start
    own = time.process_time() - own0
    cpu = {k: (cpu_ns(p) - cpu0[k]) / n / 1e3 for k, p in pids.items()}
    res.close()
    lat.sort()
    print(json.dumps({"qps": n / wall, "p50": statistics.median(lat) * 1e3,
                      "p99": lat[min(n - 1, int(n * 0.99))] * 1e3,
                      "cpu": {**cpu, "client": own / n * 1e6}}))


def measure(port: int, n: int, pids: dict[str, int]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, "--client", str(port), "-n", str(n),
                           "--pids", json.dumps(pids)], capture_output=True, text=True,
                          timeout=n * 0.05 + 120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"client failed: {done.stderr.strip()[-600:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


# --------------------------------------------------------------------------- relay process
async def _relay(upstream: int) -> None:
    if __package__:
        from ._relay import start_relay
    else:
        from _relay import start_relay
    server = await start_relay(("127.0.0.1", upstream))
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


def relay_main(upstream: int) -> None:
    """The relay's own process, on the loop ``bench-gate serve`` runs on; prints its port."""
    from bench_gate.server import run_loop
    run_loop(_relay(upstream))


# --------------------------------------------------------------------------- what-if process
async def _door_no_journal(config_path: str, db: str) -> None:
    from bench_gate.auth import Tokens
    from bench_gate.config import load_config
    from bench_gate.gateway import Gateway
    from bench_gate.models import Event
    from bench_gate.proxy import start_doors
    from bench_gate.store import SqliteStore

    class NoReadJournal(SqliteStore):
        """What-if only: reads are not journaled (the product always journals them)."""

        def log_read(self, events: list[Event]) -> None:
            return None

        def log_read_rows(self, rows: list[Any]) -> None:
            return None

    config = load_config(config_path)
    psu = config.instrument("psu")
    assert psu is not None
    psu.socket_port = 0
    store = NoReadJournal(db)
    gateway = Gateway(config, store)
    await gateway.start()
    doors = await start_doors(gateway, Tokens(store), config)
    print(doors.addresses["psu"][1], flush=True)
    await asyncio.Event().wait()


def no_journal_main(config_path: str, db: str) -> None:
    from bench_gate.server import run_loop
    run_loop(_door_no_journal(config_path, db))


# --------------------------------------------------------------------------- orchestration
def bench_toml(psu: int, dmm: int) -> str:
    return f'''bench = "proxy-bench"
[[instruments]]
name = "psu"
resource = "TCPIP0::127.0.0.1::{psu}::SOCKET"
profile = "e36312a"
[[instruments]]
name = "dmm"
resource = "TCPIP0::127.0.0.1::{dmm}::SOCKET"
profile = "34465a"
[server]
port = {free_port()}
'''


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        with suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)
    raise TimeoutError(f"port {port} did not open")


@contextmanager
def gateway(tmp: Path, name: str, config: Path, tree: Path | None
            ) -> Iterator[tuple[int, int]]:
    """``bench-gate serve`` with a socket door on the PSU, from ``tree`` (else this one):
    yields (door port, pid)."""
    door = free_port()
    home = tmp / name
    home.mkdir()
    (home / "bench.toml").write_text(config.read_text().replace(  # its own HTTP port
        "[server]\nport = ", f"[server]\nport = {free_port()}\n# was "))
    env = {**os.environ, "BENCH_GATE_HOME": str(home)}
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    with process([sys.executable, "-m", "bench_gate.cli", "serve", "--config",
                  str(home / "bench.toml"), "--db", str(home / "gateway.db"),
                  "--door", f"psu={door}"],
                 env=env, cwd=home) as proc:
        wait_port(door, proc)
        yield door, proc.pid


@contextmanager
def printing(args: list[str]) -> Iterator[tuple[int, int]]:
    """A server process of this script that prints its port: yields (port, pid)."""
    with process([sys.executable, __file__, *args]) as proc:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{args[0]} exited with {proc.wait()}")
        yield int(line), proc.pid


def summarize(rounds: list[dict[str, dict[str, Any]]], floor: str) -> list[str]:
    """Medians over the rounds; each ratio against the floor of its own round."""
    def med(values: list[float]) -> str:
        return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"

    lines = [f"{'server':26} {'q/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'server µs':>10} "
             f"{'sim µs':>7} {'client µs':>9} | q/s floor/it, p50 it/floor, server CPU "
             "it/floor: median (range)"]
    for name in rounds[0]:
        rs = [r[name] for r in rounds]
        cell = {k: statistics.median(r[k] for r in rs) for k in ("qps", "p50", "p99")}
        cpu = {k: statistics.median(r["cpu"][k] for r in rs) for k in ("server", "sim", "client")}
        line = (f"{name:26} {cell['qps']:7.0f} {cell['p50']:7.3f} {cell['p99']:7.3f} "
                f"{cpu['server']:10.1f} {cpu['sim']:7.1f} {cpu['client']:9.1f}")
        if name != floor:
            fl = [r[floor] for r in rounds]
            line += (" | " + med([f["qps"] / r["qps"] for f, r in zip(fl, rs, strict=True)])
                     + ", " + med([r["p50"] / f["p50"] for f, r in zip(fl, rs, strict=True)])
                     + ", " + med([r["cpu"]["server"] / f["cpu"]["server"]
                                   for f, r in zip(fl, rs, strict=True)]))
        lines.append(line)
    return lines


@contextmanager
def simulated(tmp: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, int]]:
    """The simulated bench in its own process and a bench.toml for it in ``tmp``: yields
    (the simulator's process, the config's path, the supply's port)."""
    psu, dmm = free_port(), free_port()
    config = tmp / "bench.toml"
    config.write_text(bench_toml(psu, dmm))
    with process([sys.executable, "-m", "sim_instruments", "serve", "--psu-port", str(psu),
                  "--dmm-port", str(dmm)], cwd=ROOT) as sim:
        assert sim.stdout is not None
        sim.stdout.readline()  # serving
        yield sim, config, psu


def main_processes(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    load0 = os.getloadavg()
    with ExitStack() as stack:
        sim, config, psu = stack.enter_context(simulated(tmp))
        servers = {"relay (uvloop)": stack.enter_context(printing(["--serve-relay", str(psu)])),
                   "gateway": stack.enter_context(gateway(tmp, "gateway", config, None))}
        if args.what_if_no_journal:
            servers["what-if: no read journal"] = stack.enter_context(printing(
                ["--serve-no-journal", str(config), str(tmp / "what-if.db")]))
        for i, tree in enumerate(args.compare):
            servers[f"compare {i + 1}: {Path(tree).name}"[:26]] = stack.enter_context(
                gateway(tmp, f"compare{i}", config, Path(tree).resolve()))
        rounds: list[dict[str, dict[str, Any]]] = []
        for r in range(args.rounds):
            order = list(servers) if r % 2 == 0 else list(reversed(servers))
            results = {name: measure(servers[name][0], args.n,
                                     {"server": servers[name][1], "sim": sim.pid})
                       for name in order}
            rounds.append({name: results[name] for name in servers})
    load1 = os.getloadavg()
    print(f"{args.n} sequential {QUERY!r} reads per server per round, {args.rounds} rounds, "
          f"each server, simulator and client its own process (python "
          f"{sys.version.split()[0]}, {os.cpu_count()} cpus); load average "
          f"{load0[0]:.1f} at the start, {load1[0]:.1f} at the end\n")
    print("\n".join(summarize(rounds, "relay (uvloop)")))
    print("\nCPU per query in µs, each process's whole CPU (every thread) while the client "
          "measured.")
    gw = [r["gateway"] for r in rounds]
    fl = [r["relay (uvloop)"] for r in rounds]
    ratio = statistics.median(f["qps"] / g["qps"] for f, g in zip(fl, gw, strict=True))
    print(f"goal: the gateway within 1.3x of the relay floor (q/s, median of the rounds): "
          f"{ratio:.2f}x -> {'met' if ratio <= 1.3 else 'NOT met'}")


def spy(n: int, out: str) -> None:
    """Where ``bench-gate serve``'s time goes during ``n`` sequential door reads: py-spy's
    raw samples (``py-spy`` on PATH) of every thread of the gateway's process."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    with ExitStack() as stack:
        sim, config, _psu = stack.enter_context(simulated(tmp))
        port, pid = stack.enter_context(gateway(tmp, "gateway", config, None))
        pids = {"server": pid, "sim": sim.pid}
        measure(port, 500, pids)  # warm: parse cache, read plans, connections
        recorder = subprocess.Popen(["py-spy", "record", "-r", "500", "-f", "raw", "--threads",
                                     "-o", out, "-p", str(pid)])
        time.sleep(1.5)  # py-spy attached
        result = measure(port, n, pids)
        recorder.send_signal(2)
        recorder.wait(60)
    print(json.dumps(result))


def main() -> None:
    argv = sys.argv[1:]
    if ONE_PROCESS_FLAGS & set(argv):
        if __package__:
            from ._proxy_one import main as one_process
        else:
            from _proxy_one import main as one_process
        one_process([a for a in argv if a != "--one-process"])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=3000, help="reads per server per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--what-if-no-journal", action="store_true",
                        help="also the door with reads not journaled (not the product)")
    parser.add_argument("--compare", action="append", default=[], metavar="DIR",
                        help="also bench-gate serve from the source tree DIR (repeatable)")
    parser.add_argument("--spy", metavar="OUT",
                        help="instead: py-spy the gateway's process during one round of -n "
                             "reads, raw samples (every thread) to OUT")
    parser.add_argument("--client", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--pids", help=argparse.SUPPRESS)
    parser.add_argument("--serve-relay", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve-no-journal", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client is not None:
        client_main(args.client, args.n, json.loads(args.pids))
    elif args.serve_relay is not None:
        relay_main(args.serve_relay)
    elif args.serve_no_journal is not None:
        no_journal_main(*args.serve_no_journal)
    elif args.spy:
        spy(args.n, args.spy)
    else:
        main_processes(args)


if __name__ == "__main__":
    main()
