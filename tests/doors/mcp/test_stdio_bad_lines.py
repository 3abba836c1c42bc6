"""``bench-gate mcp`` on stdio answers a line that is not a JSON-RPC message with a JSON-RPC
error (id null: -32700 for what is not JSON, -32600 for JSON that is no message), never
drops it in silence; the session goes on and answers the next request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..._http_bench import Bench, start_bench

BENCH_GATE = str(Path(sys.executable).parent / "bench-gate")
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}}


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("mcp-stdio-lines"))


def test_a_bad_line_is_answered_and_the_session_goes_on(bench: Bench) -> None:
    lines = [b"not json", b"\xff\xfe{", json.dumps(INIT).encode(), b"[1, 2]",
             b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
             b'{"jsonrpc": "2.0", "id": "x", "method"', b"{}",
             b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}']
    done = subprocess.run([BENCH_GATE, "mcp", "--url", bench.url],
                          input=b"\n".join(lines) + b"\n", capture_output=True, timeout=60,
                          env={**os.environ, "BENCH_GATE_TOKEN": bench.tokens["bot"]})
    out = [json.loads(line) for line in done.stdout.decode().splitlines()]
    errors = [m for m in out if "error" in m]
    assert [e["error"]["code"] for e in errors] == [-32700, -32700, -32600, -32700, -32600], out
    assert all(e["id"] is None and e["error"]["message"] for e in errors), errors
    assert "not json" not in json.dumps(errors)  # the rule, never the line sent
    results = {m["id"]: m["result"] for m in out if "result" in m}
    assert set(results) == {1, 2}, out
    assert {t["name"] for t in results[2]["tools"]} >= {"scpi_query", "scpi_write"}
    assert "Traceback" not in done.stderr.decode()
