"""``bench-gate mcp`` on stdio answers a line that is not a JSON-RPC message with a JSON-RPC
error (id null: -32700 for what is not JSON, -32600 for JSON that is no message), never
drops it in silence; the session goes on and answers the next request."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
    # As a client does, stdin stays open until the last answer came: at end of input the
    # session ends, and a request still in flight then is never answered.
    proc = subprocess.Popen([BENCH_GATE, "mcp", "--url", bench.url], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "BENCH_GATE_TOKEN": bench.tokens["bot"]})
    assert proc.stdin is not None and proc.stdout is not None
    heard: queue.Queue[bytes] = queue.Queue()

    def read() -> None:
        for line in proc.stdout or []:
            heard.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    out: list[dict[str, Any]] = []
    try:
        proc.stdin.write(b"\n".join(lines) + b"\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 60
        while not any(m.get("id") == 2 for m in out) and time.monotonic() < deadline:
            try:
                out.append(json.loads(heard.get(timeout=max(0.0, deadline - time.monotonic()))))
            except queue.Empty:
                break
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    reader.join(timeout=10)
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.stderr.close()
    errors = [m for m in out if "error" in m]
    assert [e["error"]["code"] for e in errors] == [-32700, -32700, -32600, -32700, -32600], out
    assert all(e["id"] is None and e["error"]["message"] for e in errors), errors
    assert "not json" not in json.dumps(errors)  # the rule, never the line sent
    results = {m["id"]: m["result"] for m in out if "result" in m}
    assert set(results) == {1, 2}, out
    assert {t["name"] for t in results[2]["tools"]} >= {"scpi_query", "scpi_write"}
    assert "Traceback" not in err.decode()
