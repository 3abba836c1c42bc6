"""The stdio MCP door's client killed outright (docs/reliability.md section 7): an agent
SIGKILLed while ``bench-gate mcp`` serves it. A gone client's request never runs: the run
closes at once, its pending requests cancelled and journaled, nothing reaches the PSU."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench_gate.mcp import client_gone

from ..._http_bench import Bench, start_bench

BENCH_GATE = str(Path(sys.executable).parent / "bench-gate")

#: The agent: an MCP client over stdio that files a held write, says its id, then waits
#: (``wait_for_decision``: a long poll in flight when it is killed).
AGENT = """
import json, sys, anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

async def main() -> None:
    params = StdioServerParameters(command=sys.argv[1], args=["mcp", "--url", sys.argv[2]],
                                   env={"BENCH_GATE_TOKEN": sys.argv[3]})
    async with Client(params, read_timeout_seconds=600) as client:
        await client.call_tool("set_goal", {"goal": "bring CH1 up"})
        out = (await client.call_tool("scpi_write", {
            "instrument": "psu", "command": "VOLT 4,(@1)",
            "rationale": "the DUT needs 4 V"})).structured_content
        print(json.dumps(out), flush=True)
        await client.call_tool("wait_for_decision", {"takeover_id": out["takeoverId"],
                                                     "timeout_s": 600})

anyio.run(main)
"""


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    yield from start_bench(tmp_path)


def _takeover(bench: Bench, tk: str) -> dict[str, object]:
    with bench.http("olga") as h:
        r = h.get(f"/v1/takeover/{tk}")
        assert r.status_code == 200, r.text
        body: dict[str, object] = r.json()
        return body


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _gone(pid: int, seconds: float) -> None:
    """``pid`` ended within ``seconds`` (a zombie counts: it has ended)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        if state == "Z":
            return
        time.sleep(0.1)
    raise AssertionError(f"bench-gate mcp (pid {pid}) outlived its client")


def test_a_sigkilled_stdio_agents_pending_write_is_cancelled_and_never_runs(
        bench: Bench, tmp_path: Path) -> None:
    """The agent (the MCP client) is SIGKILLed with its write pending and a
    ``wait_for_decision`` in flight. Before, its run stayed open and the pending write
    could still be granted and run for nobody. Now ``bench-gate mcp`` sees its stdin end
    and closes the run: the write is cancelled (journaled), and a late grant is refused."""
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    servers: list[int] = []
    agent = subprocess.Popen([sys.executable, str(script), BENCH_GATE, bench.url,
                              bench.tokens["bot"]], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        assert agent.stdout is not None
        line = agent.stdout.readline()
        out = json.loads(line)
        assert out["status"] == "pending", out
        tk = out["takeoverId"]
        time.sleep(0.5)  # the wait_for_decision call is in flight
        servers = _children(agent.pid)
        assert servers, "the agent started bench-gate mcp"
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(5)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            req = _takeover(bench, tk)
            if req["status"] != "pending":
                break
            time.sleep(0.2)
        assert req["status"] == "cancelled", req
        assert "client gone: its MCP client on stdio ended" in str(req["outcome"]), req
        with bench.http("olga") as h:
            shown = _takeover(bench, tk)["proposalHash"]
            r = h.post(f"/v1/runs/{req['runId']}/takeover/{tk}/grant",
                       json={"approve": ["setpoint"], "proposalHash": shown})
            assert r.status_code == 409, r.text
            run = h.get(f"/v1/runs/{req['runId']}").json()
            assert run["status"] == "closed", run
            journal = h.get(f"/v1/runs/{req['runId']}/journal").json()["events"]
            assert any(e["type"] == "takeover_cancelled" and e.get("requestId") == tk
                       for e in journal), journal
        assert float(bench.psu("VOLT? (@1)")) == 0
        for pid in servers:  # bench-gate mcp ends with its client
            _gone(pid, 10)
    finally:
        for pid in [agent.pid, *servers]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        agent.wait(5)


def test_a_pipe_whose_writer_is_gone_is_a_gone_client() -> None:
    """poll(2)'s hang-up on stdin's pipe, with data still unread or none; the parent alive."""
    read, write = os.pipe()
    try:
        assert not client_gone(os.getppid(), read)
        os.write(write, b"{}\n")
        assert not client_gone(os.getppid(), read)
        os.close(write)
        assert client_gone(os.getppid(), read)
        assert client_gone(os.getppid() + 1, read)
    finally:
        os.close(read)
