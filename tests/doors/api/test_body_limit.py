"""Request bodies are capped before authentication (issue 15): an unauthenticated
``POST /v1/runs`` or ``POST /login`` with a huge body gets 413 at once, is never read whole,
the server's memory does not grow, and ``/healthz`` keeps answering.

The server runs as ``bench-gate serve`` in its own process (so its RSS is its own, read from
``/proc/<pid>/status``), with ``[server] max_body_bytes`` set in its bench.toml.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from bench_gate.api import BodyLimit
from sim_instruments import SimBenchThread

LIMIT = 256 * 1024
HUGE = 50 * 1024 * 1024
CHUNK = 64 * 1024


@dataclass
class Served:
    url: str
    pid: int


def _kib(pid: int, field: str) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB", status, re.MULTILINE)
    assert match, status
    return int(match.group(1))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("body-limit")
    with SimBenchThread() as sim:
        config = tmp / "bench.toml"
        config.write_text(f"""
bench = "body-limit"
[[instruments]]
name = "psu"
resource = "TCPIP0::127.0.0.1::{sim.psu_port}::SOCKET"
profile = "e36312a"
[server]
max_body_bytes = {LIMIT}
""")
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench_gate.cli", "serve", "--config", str(config),
             "--db", str(tmp / "bench.db"), "--host", "127.0.0.1", "--port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "BENCH_GATE_HOME": str(tmp)})
        try:
            url = None
            assert proc.stdout is not None
            deadline = time.monotonic() + 30
            while url is None and time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line:
                    break
                found = re.search(r"HTTP API\s+(http://127\.0\.0\.1:\d+)", line)
                url = found.group(1) if found else None
            assert url, "bench-gate serve did not report its address"
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # drain
            yield Served(url, proc.pid)
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def body(total: int = HUGE) -> Iterator[bytes]:
    """A bounded generator: ``total`` bytes in CHUNK pieces, never held at once."""
    piece = b"{" * CHUNK
    sent = 0
    while sent < total:
        n = min(CHUNK, total - sent)
        sent += n
        yield piece[:n]


def _post(url: str, path: str, headers: dict[str, str]) -> httpx.Response:
    with httpx.Client(base_url=url, timeout=30) as h:
        return h.post(path, content=body(), headers=headers)


@pytest.mark.parametrize(("path", "declared"), [
    ("/v1/runs", True), ("/v1/runs", False), ("/login", True), ("/login", False),
    ("/mcp", False)])
def test_huge_unauthenticated_body_is_refused_unread(served: Served, path: str,
                                                     declared: bool) -> None:
    headers = {"Content-Type": "application/json" if path != "/login" else
               "application/x-www-form-urlencoded"}
    if declared:
        headers["Content-Length"] = str(HUGE)
    peak_before = _kib(served.pid, "VmHWM")
    healthz: list[float] = []
    done = threading.Event()

    def poll() -> None:  # /healthz while the upload is under way
        with httpx.Client(base_url=served.url, timeout=10) as h:
            while True:  # at least once after the upload started
                started = time.monotonic()
                assert h.get("/healthz").status_code == 200
                healthz.append(time.monotonic() - started)
                if done.is_set():
                    return
                time.sleep(0.02)

    poller = threading.Thread(target=poll)
    poller.start()
    started = time.monotonic()
    try:
        r = _post(served.url, path, headers)
    finally:
        elapsed = time.monotonic() - started
        done.set()
        poller.join(15)
    assert r.status_code == 413, r.text
    assert r.headers["content-type"] == "application/problem+json"
    problem = r.json()
    assert problem["status"] == 413 and problem["limit"] == LIMIT
    assert f"over this server's limit of {LIMIT} bytes" in problem["reason"]
    assert elapsed < 10, elapsed
    grown = _kib(served.pid, "VmHWM") - peak_before
    assert grown < 4 * 1024, f"the server's peak RSS grew by {grown} KiB"
    assert healthz and max(healthz) < 1.0, healthz


def test_bodies_under_the_limit_still_reach_the_routes(served: Served) -> None:
    with httpx.Client(base_url=served.url, timeout=10) as h:
        r = h.post("/v1/runs", json={"kind": "script", "goal": "x" * 1000})
        assert r.status_code == 401, r.text  # read, then refused for want of a token
        r = h.post("/v1/runs", content=body(LIMIT), headers={"Content-Type": "text/plain"})
        assert r.status_code == 401, r.text  # exactly the limit: not refused for size
        r = h.post("/v1/runs", content=b"x" * (LIMIT + 1))
        assert r.status_code == 413, r.text


async def test_chunked_body_is_counted_and_handed_on_whole() -> None:
    """The middleware alone: a chunked body under the limit reaches the app as it was sent;
    over it, the app is never called."""
    seen: list[bytes] = []

    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        got = b""
        while True:
            message = await receive()  # type: ignore[operator]
            got += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen.append(got)
        await send({"type": "http.response.start", "status": 204,  # type: ignore[operator]
                    "headers": []})
        await send({"type": "http.response.body", "body": b""})  # type: ignore[operator]

    def chunks(*parts: bytes) -> object:
        messages = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1}
                    for i, p in enumerate(parts)]

        async def receive() -> dict[str, object]:
            return messages.pop(0)
        return receive

    sent: list[dict[str, object]] = []

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    limited = BodyLimit(app, max_bytes=10)  # type: ignore[arg-type]
    scope = {"type": "http", "headers": [(b"transfer-encoding", b"chunked")]}
    await limited(scope, chunks(b"abc", b"defg", b"hij"), send)  # type: ignore[arg-type]
    assert seen == [b"abcdefghij"] and sent[0]["status"] == 204
    sent.clear()
    await limited(scope, chunks(b"abcdef", b"ghijk", b"never read"),  # type: ignore[arg-type]
                  send)
    assert seen == [b"abcdefghij"], "the app never saw the oversize body"
    assert sent[0]["status"] == 413
