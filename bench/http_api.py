"""Read-only queries per second over HTTP, with 1 and 8 concurrent clients, in one run:

    python bench/http_api.py [--seconds 5]

Everything runs as separate processes, as on a bench: the simulated instruments
(``python -m sim_instruments serve``, standing in for hardware), the server under test, and a
load generator (keep-alive HTTP/1.1 connections on one event loop, about as light a client as
Python has). Three servers are measured with the same load:

  floor     a bare FastAPI endpoint on the same uvicorn, loop and HTTP parser: bearer check
            and JSON in, JSON out, no gateway (what any FastAPI service can do here)
  gateway   ``bench-gate serve`` answering ``POST /v1/runs/{id}/scpi`` reads from the DMM
            and the PSU: token, run, classify, policy, lane, instrument, journal
  core      the same reads on the in-process core (``Gateway.submit``), no HTTP

and each is printed with its ratio to the floor. Goal: at least 2,000 q/s with 8 clients.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

if __package__:  # imported as bench.<script>
    from ._procs import free_port, process, wait_up
else:  # run as python bench/<script>.py
    from _procs import free_port, process, wait_up

ROOT = Path(__file__).resolve().parent.parent
#: Reads spread over both instruments, as a test script would.
COMMANDS = [{"instrument": "dmm", "command": "*IDN?"},
            {"instrument": "psu", "command": "VOLT? (@1)"}]

FLOOR_APP = '''
from fastapi import FastAPI, Header, HTTPException
from pydantic import BaseModel

app = FastAPI()

class Body(BaseModel):
    instrument: str
    command: str

@app.post("/v1/runs/{run_id}/scpi")
async def scpi(run_id: str, body: Body, authorization: str = Header()) -> dict[str, str]:
    if not authorization.startswith("Bearer "):
        raise HTTPException(401)
    return {"status": "executed", "response": "+1.0E+00"}
'''


# --------------------------------------------------------------------------- load generator
async def _client(port: int, requests: list[bytes], end: float, counts: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = 0
    while time.perf_counter() < end:
        writer.write(requests[i % len(requests)])
        i += 1
        head = await reader.readuntil(b"\r\n\r\n")
        status = head[9:12]
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        body = await reader.readexactly(length)
        if status != b"200":
            raise RuntimeError(f"HTTP {status.decode()}: {body[:200]!r}")
        counts[0] += 1
    writer.close()


async def _load(port: int, requests: list[bytes], clients: int, seconds: float) -> float:
    counts = [0]
    warm = time.perf_counter() + min(1.0, seconds / 5)
    await asyncio.gather(*(_client(port, requests, warm, [0]) for _ in range(clients)))
    start = time.perf_counter()
    await asyncio.gather(*(_client(port, requests, start + seconds, counts)
                           for _ in range(clients)))
    return counts[0] / (time.perf_counter() - start)


def load_main(spec: str) -> None:
    """The load generator's own process: ``--load '{json}'`` prints q/s."""
    s = json.loads(spec)
    requests = [r.encode("latin-1") for r in s["requests"]]
    from bench_gate.server import run_loop
    rate = run_loop(_load(s["port"], requests, s["clients"], s["seconds"]))
    print(json.dumps({"qps": rate}))


def request_bytes(port: int, paths: list[str], token: str) -> list[str]:
    out = []
    for i, path in enumerate(paths):
        body = json.dumps(COMMANDS[i % len(COMMANDS)])
        out.append(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                   f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n{body}")
    return out


def run_load(port: int, requests: list[str], clients: int, seconds: float) -> float:
    spec = json.dumps({"port": port, "requests": requests, "clients": clients,
                       "seconds": seconds})
    done = subprocess.run([sys.executable, __file__, "--load", spec], capture_output=True,
                          text=True, timeout=seconds * 4 + 60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"load generator failed: {done.stderr.strip()[-400:]}")
    return float(json.loads(done.stdout)["qps"])


# --------------------------------------------------------------------------- the servers
def floor_rates(tmp: Path, seconds: float) -> dict[int, float]:
    (tmp / "floor_app.py").write_text(FLOOR_APP)
    port = free_port()
    with process([sys.executable, "-m", "uvicorn", "floor_app:app", "--port", str(port),
                  "--log-level", "warning", "--no-access-log"], cwd=tmp) as proc:
        wait_up(f"http://127.0.0.1:{port}/docs", proc)
        reqs = request_bytes(port, ["/v1/runs/r1/scpi"], "bg_floor")
        return {n: run_load(port, reqs, n, seconds) for n in (1, 8)}


def bench_toml(psu: int, dmm: int, port: int) -> str:
    return f'''bench = "http-bench"
[[instruments]]
name = "psu"
resource = "TCPIP0::127.0.0.1::{psu}::SOCKET"
profile = "e36312a"
[[instruments]]
name = "dmm"
resource = "TCPIP0::127.0.0.1::{dmm}::SOCKET"
profile = "34465a"
[server]
port = {port}
'''


def gateway_rates(tmp: Path, psu: int, dmm: int, seconds: float) -> dict[int, float]:
    from bench_gate.auth import Tokens
    from bench_gate.store import SqliteStore

    port = free_port()
    config = tmp / "bench.toml"
    config.write_text(bench_toml(psu, dmm, port))
    db = tmp / "gateway.db"
    store = SqliteStore(db)
    token = Tokens(store).create("bench", "requester")[1]
    store.close()
    env = {**os.environ, "BENCH_GATE_HOME": str(tmp)}
    with process([sys.executable, "-m", "bench_gate.cli", "serve", "--config", str(config),
                  "--db", str(db)], env=env) as proc:
        url = f"http://127.0.0.1:{port}"
        wait_up(f"{url}/healthz", proc)
        rates = {}
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as h:
            for n in (1, 8):
                runs = [h.post("/v1/runs", json={"kind": "script"}).json()["id"]
                        for _ in range(n)]
                # Each client keeps to its own run, alternating DMM and PSU reads.
                paths = [f"/v1/runs/{r}/scpi" for r in runs for _ in COMMANDS]
                reqs = request_bytes(port, paths, token)
                rates[n] = run_load(port, reqs, n, seconds)
        return rates


async def _core(psu: int, dmm: int, clients: int, seconds: float, db: Path) -> float:
    from bench_gate.config import default_config
    from bench_gate.gateway import Gateway
    from bench_gate.models import Principal, Role
    from bench_gate.store import open_store

    gw = Gateway(default_config(psu, dmm), open_store(db))
    await gw.start()
    who = Principal(name="bench", role=Role.REQUESTER)
    runs = [gw.create_run(who, "script").id for _ in range(clients)]
    count = 0
    end = time.perf_counter() + seconds

    async def worker(run: str) -> None:
        nonlocal count
        i = 0
        while time.perf_counter() < end:
            cmd = COMMANDS[i % len(COMMANDS)]
            i += 1
            await gw.submit(run, cmd["instrument"], cmd["command"])
            count += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker(r) for r in runs))
    rate = count / (time.perf_counter() - start)
    await gw.close()
    gw.store.close()
    return rate


def core_rates(tmp: Path, psu: int, dmm: int, seconds: float) -> dict[int, float]:
    from bench_gate.server import run_loop
    return {n: run_loop(_core(psu, dmm, n, seconds, tmp / f"core{n}.db")) for n in (1, 8)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--load", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load:
        load_main(args.load)
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench-http-"))
    psu, dmm = free_port(), free_port()
    with process([sys.executable, "-m", "sim_instruments", "serve", "--psu-port", str(psu),
                  "--dmm-port", str(dmm)], cwd=ROOT) as sim:
        assert sim.stdout is not None
        sim.stdout.readline()  # serving
        results = {"floor (bare FastAPI)": floor_rates(tmp, args.seconds),
                   "gateway (bench-gate serve)": gateway_rates(tmp, psu, dmm, args.seconds),
                   "core (in-process)": core_rates(tmp, psu, dmm, args.seconds)}
    floor = results["floor (bare FastAPI)"]
    print(f"read-only queries per second, {args.seconds:g} s per row "
          f"(python {sys.version.split()[0]}, {os.cpu_count()} cpus)\n")
    print(f"{'server':28} {'clients':>7} {'q/s':>8} {'/ floor':>8}")
    for name, rates in results.items():
        for n, rate in rates.items():
            print(f"{name:28} {n:7d} {rate:8.0f} {rate / floor[n]:7.2f}x")
    gw8 = results["gateway (bench-gate serve)"][8]
    print(f"\ngoal: >= 2000 q/s over HTTP with 8 clients: {gw8:.0f} -> "
          f"{'met' if gw8 >= 2000 else 'NOT met'}")


if __name__ == "__main__":
    main()
