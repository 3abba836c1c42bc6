"""A client that pipes its requests to ``bench-gate mcp`` on stdio and closes stdin at once
(``printf ... | bench-gate mcp``) reads an answer to every request: at the end of input the
SDK cancels the calls still in flight, unanswered, so the end reaches it only once each
request has its answer. The client counts as gone all the same: its run is closed, and the
write it asked for never runs (the supply read on the simulator's own port)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from ..._http_bench import Bench, start_bench
from .test_stdio_bad_lines import BENCH_GATE, INIT


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("mcp-stdio-piped"))


def call(id_: int, tool: str, **arguments: Any) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments}})


@pytest.mark.parametrize("round_", range(3))  # the race it closes is one of timing
def test_every_piped_request_is_answered_after_stdin_closes(bench: Bench, round_: int) -> None:
    lines = [json.dumps(INIT), '{"jsonrpc": "2.0", "method": "notifications/initialized"}',
             '{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}',
             call(3, "set_goal", goal="read the supply"),
             call(4, "scpi_query", instrument="psu", command="VOLT? (@1)"),
             call(5, "scpi_query", instrument="psu", command="*IDN?"),
             call(6, "scpi_write", instrument="psu", command="VOLT 1.5,(@1)",
                  rationale="bring the DUT up")]
    done = subprocess.run([BENCH_GATE, "mcp", "--url", bench.url],
                          input=("\n".join(lines) + "\n").encode(), capture_output=True,
                          env={**os.environ, "BENCH_GATE_TOKEN": bench.tokens["bot"]},
                          timeout=90)
    out = [json.loads(line) for line in done.stdout.splitlines()]
    answered = {m["id"] for m in out if "id" in m and ("result" in m or "error" in m)}
    assert answered == {1, 2, 3, 4, 5, 6}, (out, done.stderr.decode()[-2000:])
    assert "Traceback" not in done.stderr.decode()
    # Gone all the same: nothing it asked to write runs, now or later.
    assert Decimal(bench.psu("VOLT? (@1)")) == 0
    with bench.http("ada") as h:
        got = h.get("/v1/runs")
        assert got.status_code == 200, got.text
        runs = [r for r in got.json() if r["principal"] == "bot"]
    assert runs and all(r["status"] == "closed" for r in runs), runs
