"""``bench-gate mcp`` itself killed (SIGKILL, out of memory, a laptop lid): nothing is left
to close its run, so the gateway does, when the run's heartbeat term runs out (terms.py).
Its pending write is cancelled within the term, and an approval after that writes nothing
(the simulator's own port)."""

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

from ..._cli import cli
from ..._http_bench import Bench, start_bench
from .test_review_holes_7 import AGENT, BENCH_GATE, _children, _takeover

TERM = 3
#: The same agent, with ``bench-gate mcp`` given a term (its options after the token).
AGENT_WITH_TERM = AGENT.replace('args=["mcp", "--url", sys.argv[2]]',
                                'args=["mcp", "--url", sys.argv[2], *sys.argv[4:]]')


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    yield from start_bench(tmp_path)


def test_a_sigkilled_bench_gate_mcp_has_its_write_cancelled_within_its_term(
        bench: Bench, tmp_path: Path) -> None:
    """Before, the run of a SIGKILLed ``bench-gate mcp`` stayed open: its write pending
    until it expired (10 min), and an operator's approval wrote it for nobody."""
    assert AGENT_WITH_TERM != AGENT
    script = tmp_path / "agent.py"
    script.write_text(AGENT_WITH_TERM)
    servers: list[int] = []
    agent = subprocess.Popen([sys.executable, str(script), BENCH_GATE, bench.url,
                              bench.tokens["bot"], "--heartbeat-seconds", str(TERM)],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert agent.stdout is not None
        out = json.loads(agent.stdout.readline())
        assert out.get("status") == "pending", out
        tk = out["takeoverId"]
        run_id = str(_takeover(bench, tk)["runId"])
        with bench.http("bot") as h:
            run = h.get(f"/v1/runs/{run_id}").json()
        assert run["heartbeatSeconds"] == TERM, run
        # Alive, it heartbeats off its tool calls (one long-polls): two terms, still open.
        time.sleep(2 * TERM)
        assert _takeover(bench, tk)["status"] == "pending"
        servers = _children(agent.pid)
        assert servers, "the agent started bench-gate mcp"
        for pid in servers:
            os.kill(pid, signal.SIGKILL)  # the MCP server itself, not its client
        killed = time.monotonic()
        while time.monotonic() - killed < TERM + 2:
            req = _takeover(bench, tk)
            if req["status"] != "pending":
                break
            time.sleep(0.1)
        took = time.monotonic() - killed
        assert req["status"] == "cancelled", req
        assert took <= TERM + 1.0, f"cancelled {took:.1f} s after the kill"
        assert req["outcome"] == (f"cancelled: client gone: no heartbeat for {TERM} s; "
                                  "nothing was written"), req
        with bench.http("olga") as h:
            r = h.post(f"/v1/runs/{run_id}/takeover/{tk}/grant",
                       json={"approve": ["setpoint"], "proposalHash": req["proposalHash"]})
            assert r.status_code == 409, r.text
            run = h.get(f"/v1/runs/{run_id}").json()
            assert run["status"] == "closed", run
            assert run["closedReason"] == f"client gone: no heartbeat for {TERM} s"
            events = h.get(f"/v1/runs/{run_id}/journal", params={"limit": 1000}).json()
        assert any(e["type"] == "run_closed" for e in events["events"]), events
        time.sleep(1.0)  # had anything been let through, the sweeper would run it now
        assert float(bench.psu("VOLT? (@1)")) == 0
    finally:
        for pid in [agent.pid, *servers]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        agent.wait(5)


@pytest.mark.parametrize("term", ["0", "-1", "86401", "1.5"])
def test_bench_gate_mcp_refuses_a_term_out_of_bounds(bench: Bench, term: str) -> None:
    done = cli("mcp", "--url", bench.url, "--token", bench.tokens["bot"],
               "--heartbeat-seconds", term)
    assert done.returncode != 0
    assert "--heartbeat-seconds" in done.stderr, done
