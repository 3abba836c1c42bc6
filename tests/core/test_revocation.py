"""Revocation is immediate everywhere: revoking a token closes its live socket-door
connections and MCP sessions and cancels their held requests within 2 s, whether it is
revoked over HTTP (announced in-process) or by another process sharing the store (found by
the gateway's re-check). The simulator's own port shows that nothing landed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import pyvisa
from mcp.shared.exceptions import MCPError

from .._http_bench import Bench, start_bench
from ..doors.mcp.test_mcp import call, data, http_session
from .test_quotas import door, requester

WITHIN = 2.0  # seconds, from the revocation to everything done


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("revocation"))


def until(check: Callable[[], Any], seconds: float = 10.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.05)


def requests_of(bench: Bench, run: str, status: str | None = None) -> list[dict[str, Any]]:
    with bench.http("olga") as h:
        r = h.get(f"/v1/runs/{run}/takeover", params={"status": status} if status else {})
        assert r.status_code == 200, r.text
        found: list[dict[str, Any]] = r.json()
        return found


def status_of(bench: Bench, tk: str) -> dict[str, Any]:
    with bench.http("olga") as h:
        body: dict[str, Any] = h.get(f"/v1/takeover/{tk}").json()
        return body


def revoke_over_http(bench: Bench, name: str) -> None:
    with bench.http("ada") as h:
        r = h.delete(f"/v1/tokens/{name}")
        assert r.status_code == 200 and r.json() == {"revoked": 1}, r.text


def revoke_from_another_process(bench: Bench, name: str) -> None:
    """``bench-gate token revoke`` on the store file: the serving gateway is not told."""
    done = subprocess.run([sys.executable, "-m", "bench_gate.cli", "token", "revoke", name,
                           "--db", str(bench.db)], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ))
    assert done.returncode == 0 and "revoked 1 token" in done.stdout, done.stderr


def connection_closed(psu: Any) -> bool:
    # A door that closed the connection shows as a VISA timeout or I/O error on the read, or,
    # when the close arrived first, as the kernel's BrokenPipe/ConnectionReset on the write.
    try:
        psu.query("*IDN?")
    except (pyvisa.errors.VisaIOError, OSError):
        return True
    return False


@pytest.mark.parametrize("revoke", [revoke_over_http, revoke_from_another_process],
                         ids=["http", "another-process"])
def test_socket_door_connection_is_closed_and_its_held_write_cancelled(
        bench: Bench, revoke: Callable[[Bench, str], None]) -> None:
    name = f"sock-{revoke.__name__}"
    token = requester(bench, name)
    before = bench.psu("VOLT? (@1)")
    psu = door(bench)
    psu.timeout = 3000
    try:
        psu.write(f'GATE:TOK "{token}"')
        run = psu.query("GATE:RUN?").strip('"')
        psu.write("VOLT 4.4,(@1)")  # held: the stream waits for a person
        psu.write("VOLT 4.6,(@1)")  # queued behind it, in the same name
        tk = until(lambda: requests_of(bench, run, "pending"))[0]["id"]

        revoke(bench, name)
        revoked_at = time.monotonic()
        cancelled = until(lambda: (s := status_of(bench, tk))["status"] == "cancelled" and s,
                          seconds=WITHIN + 1)
        assert time.monotonic() - revoked_at < WITHIN
        assert "its token was revoked" in cancelled["outcome"]
        assert connection_closed(psu)
        assert time.monotonic() - revoked_at < WITHIN + psu.timeout / 1000
    finally:
        psu.close()
    # Nothing queued behind it ran in the revoked name; the run is closed.
    assert [tk_["id"] for tk_ in requests_of(bench, run)] == [tk]
    with bench.http("olga") as h:
        assert h.get(f"/v1/runs/{run}").json()["status"] == "closed"
        late = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                      json={"approve": ["setpoint"], "proposalHash": cancelled["proposalHash"]})
        assert late.status_code == 409, late.text
    assert bench.psu("VOLT? (@1)") == before  # on the simulator's own port


async def test_mcp_session_is_ended_and_its_held_write_cancelled(bench: Bench) -> None:
    requester(bench, "mcp-agent")
    before = bench.psu("VOLT? (@1)")
    async with http_session(bench, "mcp-agent") as client:
        run = data(await call(client, "set_goal", goal="outlive my token"))["runId"]
        held = data(await call(client, "scpi_write", instrument="psu",
                               command="VOLT 4.7,(@1)", rationale="before the revocation"))
        assert held["status"] == "pending"
        tk = held["takeoverId"]

        revoke_over_http(bench, "mcp-agent")
        revoked_at = time.monotonic()
        cancelled = until(lambda: (s := status_of(bench, tk))["status"] == "cancelled" and s,
                          seconds=WITHIN + 1)
        assert time.monotonic() - revoked_at < WITHIN
        assert "its token was revoked" in cancelled["outcome"]
        with bench.http("olga") as h:
            assert h.get(f"/v1/runs/{run}").json()["status"] == "closed"
        with pytest.raises(MCPError):  # the session answers nothing more (401)
            await call(client, "scpi_write", instrument="psu", command="VOLT 4.8,(@1)",
                       rationale="after the revocation")
    assert [t["id"] for t in requests_of(bench, run)] == [tk]
    assert bench.psu("VOLT? (@1)") == before


def test_event_stream_ends_when_its_token_is_revoked(bench: Bench) -> None:
    token = requester(bench, "listener")
    with httpx.Client(base_url=bench.url, timeout=10,
                      headers={"Authorization": f"Bearer {token}"}) as h, \
            h.stream("GET", "/v1/events") as stream:
        lines = stream.iter_lines()
        assert next(lines) == ": connected"
        revoke_over_http(bench, "listener")
        revoked_at = time.monotonic()
        rest = list(lines)  # returns when the server ends the stream
        assert time.monotonic() - revoked_at < WITHIN
        assert all(not line.startswith("data:") for line in rest)
        assert h.get("/v1/events").status_code == 401
