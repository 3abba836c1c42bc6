"""Read-only queries per second over HTTP (1 and 8 concurrent clients), beside the same
queries on the in-process core. Run: ``python bench/http_api.py [--seconds 5]``."""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import httpx

from bench_gate.auth import Tokens
from bench_gate.config import default_config
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Role
from bench_gate.server import ServerThread
from bench_gate.store import open_store
from sim_instruments import SimBenchThread

COMMAND = {"instrument": "dmm", "command": "*IDN?"}


async def over_http(url: str, token: str, clients: int, seconds: float) -> float:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30,
                                 limits=httpx.Limits(max_connections=clients)) as h:
        runs = [(await h.post("/v1/runs", json={"kind": "script"})).json()["id"]
                for _ in range(clients)]
        count = 0
        end = time.perf_counter() + seconds

        async def worker(run: str) -> None:
            nonlocal count
            while time.perf_counter() < end:
                r = await h.post(f"/v1/runs/{run}/scpi", json=COMMAND)
                assert r.status_code == 200, r.text
                count += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker(r) for r in runs))
        return count / (time.perf_counter() - start)


async def in_process(psu: int, dmm: int, clients: int, seconds: float) -> float:
    gw = Gateway(default_config(psu, dmm), open_store(Path(tempfile.mkdtemp()) / "c.db"))
    await gw.start()
    who = Principal(name="bench", role=Role.REQUESTER)
    runs = [gw.create_run(who, "script").id for _ in range(clients)]
    count = 0
    end = time.perf_counter() + seconds

    async def worker(run: str) -> None:
        nonlocal count
        while time.perf_counter() < end:
            await gw.submit(run, COMMAND["instrument"], COMMAND["command"])
            count += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker(r) for r in runs))
    rate = count / (time.perf_counter() - start)
    await gw.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    with SimBenchThread() as sim:
        config = default_config(sim.psu_port, sim.dmm_port)
        for ic in config.instruments:
            ic.socket_port = None
        store = open_store(Path(tempfile.mkdtemp()) / "bench.db")
        token = Tokens(store).create("bench", "requester")[1]
        with ServerThread(config, store) as server:
            for clients in (1, 8):
                rate = asyncio.run(over_http(server.url, token, clients, args.seconds))
                print(f"HTTP        {clients} client(s): {rate:8.0f} q/s")
        for clients in (1, 8):
            rate = asyncio.run(in_process(sim.psu_port, sim.dmm_port, clients, args.seconds))
            print(f"in-process  {clients} client(s): {rate:8.0f} q/s")


if __name__ == "__main__":
    main()
