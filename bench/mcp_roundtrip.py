"""``scpi_query`` round trips, one at a time, in one run: bench-gate's MCP server over stdio
(``bench-gate mcp --url``, through the HTTP API) and over streamable HTTP (``/mcp``,
in-process), the same query over the HTTP API directly, and labmcp-scpi's ``scpi_query`` in
its ``--simulate`` mode (stdio). Run: ``python bench/mcp_roundtrip.py [--count 300]``.

bench-gate queries ``MEAS:VOLT? (@1)`` on the simulated E36312A (a TCP socket instrument
through pyvisa-py, a journaled run, the policy); labmcp-scpi queries ``MEAS:VOLT?`` on its
built-in in-process simulator (no I/O at all), so its figure is the MCP floor.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import httpx
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from bench_gate.auth import Tokens
from bench_gate.config import default_config
from bench_gate.server import ServerThread
from bench_gate.store import open_store
from sim_instruments import SimBenchThread

QUERY = "MEAS:VOLT? (@1)"
BIN = Path(sys.executable).parent


def report(name: str, samples: list[float]) -> None:
    ms = sorted(s * 1000 for s in samples)
    p95 = ms[min(len(ms) - 1, int(len(ms) * 0.95))]
    print(f"{name:<44} median {statistics.median(ms):7.2f} ms   p95 {p95:7.2f} ms   "
          f"{len(ms) / (sum(ms) / 1000):7.0f} q/s")


async def timed(count: int, one: Callable[[], Awaitable[None]]) -> list[float]:
    for _ in range(max(5, count // 20)):  # warm up
        await one()
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        await one()
        samples.append(time.perf_counter() - start)
    return samples


async def mcp_rounds(client: Client, count: int, tool_args: dict[str, str],
                     goal: bool) -> list[float]:
    if goal:
        await client.call_tool("set_goal", {"goal": "benchmark scpi_query"})

    async def one() -> None:
        r = await client.call_tool("scpi_query", tool_args)
        assert not r.is_error, r
    return await timed(count, one)


async def bench_gate_stdio(url: str, token: str, count: int) -> list[float]:
    params = StdioServerParameters(command=str(BIN / "bench-gate"), args=["mcp", "--url", url],
                                   env={"BENCH_GATE_TOKEN": token})
    async with Client(params) as client:
        return await mcp_rounds(client, count, {"instrument": "psu", "command": QUERY}, True)


async def bench_gate_http(url: str, token: str, count: int) -> list[float]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                              timeout=httpx2.Timeout(30, read=300))
    async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
        return await mcp_rounds(client, count, {"instrument": "psu", "command": QUERY}, True)


async def http_api(url: str, token: str, count: int) -> list[float]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as h:
        run = (await h.post("/v1/runs", json={"kind": "script"})).json()["id"]

        async def one() -> None:
            r = await h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                           "command": QUERY})
            assert r.status_code == 200, r.text
        return await timed(count, one)


async def labmcp(count: int) -> list[float]:
    exe = shutil.which("labmcp-scpi", path=str(BIN)) or "labmcp-scpi"
    params = StdioServerParameters(command=exe, args=["--simulate"])
    async with Client(params) as client:
        return await mcp_rounds(client, count, {"command": "MEAS:VOLT?"}, False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=300)
    args = parser.parse_args()
    with SimBenchThread() as sim:
        config = default_config(sim.psu_port, sim.dmm_port)
        for ic in config.instruments:
            ic.socket_port = None
        store = open_store(Path(tempfile.mkdtemp()) / "bench.db")
        token = Tokens(store).create("bench", "requester")[1]
        with ServerThread(config, store) as server:
            print(f"{args.count} sequential round trips each\n")
            report("HTTP API   POST /v1/runs/{id}/scpi",
                   anyio.run(http_api, server.url, token, args.count))
            report("bench-gate MCP stdio (bench-gate mcp --url)",
                   anyio.run(bench_gate_stdio, server.url, token, args.count))
            report("bench-gate MCP streamable HTTP (/mcp)",
                   anyio.run(bench_gate_http, server.url, token, args.count))
        store.close()
    report("labmcp-scpi --simulate, stdio", anyio.run(labmcp, args.count))


if __name__ == "__main__":
    main()
