"""One requester floods the bench; what it gets, what everyone else sees, and how fast a
revoked token is shut out (the figures of docs/reliability.md, section 9):

    python bench/flood.py [--attempts 3000] [--threads 8]

Separate processes, as on a bench: the simulated instruments (``python -m sim_instruments
serve``), ``bench-gate serve`` with the default ``[limits]``, and this script's clients.

  pending   one requester submits ``--attempts`` held writes from ``--threads`` threads; a
            second requester submits one every 0.25 s meanwhile (its latency, against the
            same before the flood)
  runs      the flooder creates ``--attempts`` runs
  mcp       the flooder opens MCP sessions (initialize) until refused, then 100 more
  sse       the flooder opens 400 event streams and keeps them open
  queue     15 more requesters file 200 each, behind the second requester's first write:
            the queue's page, its total and where that write is, by API and CLI
  revoke    a socket-door connection with a held write: its token revoked over HTTP, then
            (another connection) with ``bench-gate token revoke`` from another process
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

if __package__:  # imported as bench.<script>
    from ._procs import free_port, process, wait_up
else:  # run as python bench/<script>.py
    from _procs import free_port, process, wait_up

ROOT = Path(__file__).resolve().parent.parent
MCP_HEADERS = {"Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "flood", "version": "0"}}}


def bench_toml(psu: int, dmm: int, port: int, door: int) -> str:
    return f'''bench = "flood-bench"
[[instruments]]
name = "psu"
resource = "TCPIP0::127.0.0.1::{psu}::SOCKET"
profile = "e36312a"
socket_port = {door}
[[instruments]]
name = "dmm"
resource = "TCPIP0::127.0.0.1::{dmm}::SOCKET"
profile = "34465a"
[envelope.psu.1]
voltage = 6.0
current = 1.0
[server]
port = {port}
'''


def ms(values: list[float]) -> str:
    if not values:
        return "-"
    return (f"p50 {statistics.median(values) * 1000:.1f} ms, max {max(values) * 1000:.1f} ms "
            f"(n={len(values)})")


class Bench:
    def __init__(self, url: str, tokens: dict[str, str], db: Path, door: int) -> None:
        self.url, self.tokens, self.db, self.door = url, tokens, db, door

    def http(self, who: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60,
                            headers={"Authorization": f"Bearer {self.tokens[who]}"})

    def run(self, who: str) -> str:
        with self.http(who) as h:
            return str(h.post("/v1/runs", json={"kind": "script"}).json()["id"])


def submit(h: httpx.Client, run: str, i: int) -> tuple[int, float]:
    started = time.monotonic()
    r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                             "command": f"VOLT {1 + (i % 4000) / 1000:.3f},(@1)"})
    return r.status_code, time.monotonic() - started


def spread(bench: Bench, who: str, attempts: int, threads: int,
           one: Callable[[httpx.Client, int], tuple[int, float]]) -> dict[int, list[float]]:
    """``attempts`` calls of ``one`` from ``threads`` clients of ``who``: latencies by status."""
    out: dict[int, list[float]] = {}
    lock = threading.Lock()

    def worker(t: int) -> None:
        with bench.http(who) as h:
            for i in range(t, attempts, threads):
                status, took = one(h, i)
                with lock:
                    out.setdefault(status, []).append(took)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(worker, range(threads)))
    return out


def phase_pending(bench: Bench, attempts: int, threads: int) -> tuple[str, str]:
    """The text, and the second requester's run."""
    with bench.http("legit") as h:
        legit_run = bench.run("legit")
        before = [submit(h, legit_run, i)[1] for i in range(8)]
    run = bench.run("flooder")
    during: list[float] = []
    stop = threading.Event()

    def legit() -> None:
        with bench.http("legit") as h:
            while not stop.is_set():
                status, took = submit(h, legit_run, 3000 + len(during))
                if status == 202:
                    during.append(took)
                stop.wait(0.25)

    watcher = threading.Thread(target=legit)
    watcher.start()
    started = time.monotonic()
    got = spread(bench, "flooder", attempts, threads, lambda h, i: submit(h, run, i))
    elapsed = time.monotonic() - started
    stop.set()
    watcher.join()
    return (f"pending: {attempts} held writes from {threads} threads in {elapsed:.1f} s: "
            f"202 x{len(got.get(202, []))} ({ms(got.get(202, []))}), "
            f"429 x{len(got.get(429, []))} ({ms(got.get(429, []))}); other: "
            f"{ {k: len(v) for k, v in got.items() if k not in (202, 429)} }\n"
            f"  another requester's held write: before {ms(before)}; during {ms(during)}",
            legit_run)


def phase_runs(bench: Bench, attempts: int, threads: int) -> str:
    def create(h: httpx.Client, i: int) -> tuple[int, float]:
        started = time.monotonic()
        r = h.post("/v1/runs", json={"kind": "script"})
        return r.status_code, time.monotonic() - started

    started = time.monotonic()
    got = spread(bench, "flooder", attempts, threads, create)
    return (f"runs: {attempts} POST /v1/runs in {time.monotonic() - started:.1f} s: "
            f"201 x{len(got.get(201, []))} (the flooder's first run is older), "
            f"429 x{len(got.get(429, []))} ({ms(got.get(429, []))})")


def phase_mcp(bench: Bench) -> str:
    codes: dict[int, int] = {}
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {bench.tokens['flooder']}"}
    with httpx.Client(base_url=bench.url, headers=headers, timeout=30) as h:
        for _ in range(1500):
            status = h.post("/mcp", json=INITIALIZE).status_code
            codes[status] = codes.get(status, 0) + 1
            if codes.get(429, 0) >= 100:
                break
    return f"mcp: initialize answered {codes}"


def phase_sse(bench: Bench) -> str:
    codes: dict[int, int] = {}
    with bench.http("flooder") as h, contextlib.ExitStack() as open_streams:
        for _ in range(400):
            r = open_streams.enter_context(h.stream("GET", "/v1/events"))
            codes[r.status_code] = codes.get(r.status_code, 0) + 1
            if r.status_code != 200:
                r.read()
    return f"sse: 400 streams opened and kept: {codes}"


def phase_queue(bench: Bench, threads: int, legit_run: str) -> str:
    started = time.monotonic()
    filed = 0
    for n in range(15):
        run = bench.run(f"r{n:02}")
        got = spread(bench, f"r{n:02}", 200, threads, lambda h, i, r=run: submit(h, r, i))
        filed += len(got.get(202, []))
    fill = time.monotonic() - started
    with bench.http("olga") as h:
        first_legit = h.get(f"/v1/runs/{legit_run}/takeover",
                            params={"sort": "expiry", "limit": 1}).json()[0]["id"]
        times = {}
        for sort in ("newest", "expiry"):
            took = []
            for _ in range(20):
                t = time.monotonic()
                r = h.get("/v1/takeover", params={"status": "pending", "sort": sort})
                took.append(time.monotonic() - t)
            rows = [tk["id"] for tk in r.json()]
            where = rows.index(first_legit) + 1 if first_legit in rows else None
            times[sort] = (ms(took), r.headers["X-Total-Count"], len(rows), where)
    env = {**os.environ, "BENCH_GATE_TOKEN": bench.tokens["olga"]}
    t = time.monotonic()
    cli = subprocess.run([sys.executable, "-m", "bench_gate.cli", "--url", bench.url,
                          "pending"], capture_output=True, text=True, env=env, timeout=60)
    cli_took = time.monotonic() - t
    lines = cli.stdout.splitlines()
    return (f"queue: {filed} more held writes from 15 requesters in {fill:.1f} s\n"
            + "".join(f"  GET /v1/takeover?status=pending&sort={s}: {v[0]}; X-Total-Count "
                      f"{v[1]}, {v[2]} rows, the legitimate first write at row {v[3]}\n"
                      for s, v in times.items())
            + f"  bench-gate pending ({cli_took:.2f} s): first row {lines[1].split()[0]} "
              f"(the legitimate one: {lines[1].startswith(first_legit)}); last line "
              f"{lines[-1]!r}")


def phase_revoke(bench: Bench, name: str, revoke: Callable[[], None]) -> str:
    with socket.create_connection(("127.0.0.1", bench.door)) as s:
        s.sendall(f'GATE:TOK "{bench.tokens[name]}"\nGATE:RUN?\n'.encode())
        run = s.makefile().readline().strip().strip('"')
        s.sendall(b"VOLT 4.4,(@1)\nVOLT 4.6,(@1)\n")
        with bench.http("olga") as h:
            deadline = time.monotonic() + 10
            while not (pending := h.get(f"/v1/runs/{run}/takeover").json()):
                assert time.monotonic() < deadline
                time.sleep(0.02)
            tk = pending[0]["id"]
            s.settimeout(10)
            started = time.monotonic()
            revoke()
            revoked = time.monotonic()
            closed = s.recv(1) == b""
            closed_after = time.monotonic() - revoked
            while h.get(f"/v1/takeover/{tk}").json()["status"] != "cancelled":
                assert time.monotonic() - revoked < 10
                time.sleep(0.01)
            cancelled_after = time.monotonic() - revoked
            filed = h.get(f"/v1/runs/{run}/takeover").headers["X-Total-Count"]
    return (f"revoke ({name}): the revocation itself took {revoked - started:.3f} s; "
            f"connection closed {closed} {closed_after * 1000:.0f} ms after, held write "
            f"cancelled {cancelled_after * 1000:.0f} ms after; requests filed by the "
            f"connection: {filed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=3000)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    from bench_gate.auth import Tokens
    from bench_gate.store import SqliteStore

    tmp = Path(tempfile.mkdtemp(prefix="bench-flood-"))
    psu, dmm, port, door = free_port(), free_port(), free_port(), free_port()
    config = tmp / "bench.toml"
    config.write_text(bench_toml(psu, dmm, port, door))
    db = tmp / "gateway.db"
    store = SqliteStore(db)
    tokens = Tokens(store)
    roles = {"olga": "operator", "ada": "admin", "flooder": "requester",
             "legit": "requester", "sock-http": "requester", "sock-cli": "requester",
             **{f"r{n:02}": "requester" for n in range(15)}}
    secrets = {name: tokens.create(name, role)[1] for name, role in roles.items()}
    store.close()
    env = {**os.environ, "BENCH_GATE_HOME": str(tmp)}
    with process([sys.executable, "-m", "sim_instruments", "serve", "--psu-port", str(psu),
                  "--dmm-port", str(dmm)], cwd=ROOT) as sim:
        assert sim.stdout is not None
        sim.stdout.readline()  # serving
        with process([sys.executable, "-m", "bench_gate.cli", "serve", "--config",
                      str(config), "--db", str(db)], env=env) as proc:
            bench = Bench(f"http://127.0.0.1:{port}", secrets, db, door)
            wait_up(f"{bench.url}/healthz", proc)
            print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, default [limits]")
            text, legit_run = phase_pending(bench, args.attempts, args.threads)
            print(text)
            print(phase_runs(bench, args.attempts, args.threads))
            print(phase_mcp(bench))
            print(phase_sse(bench))
            print(phase_queue(bench, args.threads, legit_run))

            def over_http() -> None:
                with bench.http("ada") as h:
                    assert h.delete("/v1/tokens/sock-http").json() == {"revoked": 1}

            def from_cli() -> None:
                subprocess.run([sys.executable, "-m", "bench_gate.cli", "token", "revoke",
                                "sock-cli", "--db", str(db)], check=True,
                               capture_output=True, env=env, timeout=60)

            print(phase_revoke(bench, "sock-http", over_http))
            print(phase_revoke(bench, "sock-cli", from_cli))
    print(json.dumps({"store": str(db)}))


if __name__ == "__main__":
    main()
