"""Per-requester quotas (``[limits]``), each through the door where the flood came in: HTTP
429 problem+json with the reason (and Retry-After for pending requests), the socket door's
-200 error read with SYST:ERR?, an MCP tool error, and 429 before an MCP session or an event
stream opens. Operators are exempt. Concurrent submits never overshoot."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import pyvisa

from .._http_bench import Bench, start_bench
from ..doors.mcp.test_mcp import call, data, http_session

LIMITS = {"pending_requests": 3, "open_runs": 4, "mcp_sessions": 2, "sse_streams": 2}
MCP_HEADERS = {"Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "quota-test", "version": "0"}}}


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("quotas"), limits=LIMITS)


def requester(bench: Bench, name: str) -> str:
    """A new requester's token (each test floods as someone of its own)."""
    with bench.http("ada") as h:
        r = h.post("/v1/tokens", json={"name": name, "role": "requester"})
        assert r.status_code == 201, r.text
        bench.tokens[name] = str(r.json()["token"])
        return bench.tokens[name]


def new_run(h: httpx.Client) -> str:
    r = h.post("/v1/runs", json={"kind": "script", "goal": "quota test"})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def write(h: httpx.Client, run: str, volts: str) -> httpx.Response:
    return h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                               "command": f"VOLT {volts},(@1)"})


def assert_quota(r: httpx.Response, quota: str, limit: int) -> dict[str, Any]:
    assert r.status_code == 429, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = r.json()
    assert body["quota"] == quota and body["limit"] == limit
    assert body["type"].endswith("/quota-exceeded")
    assert f"limits.{quota} = {limit}" in body["reason"]
    return body


def test_http_pending_quota_answers_429_with_reason_and_retry_after(bench: Bench) -> None:
    requester(bench, "flooder")
    with bench.http("flooder") as h:
        run = new_run(h)
        held = [write(h, run, f"1.{i}") for i in range(3)]
        assert [r.status_code for r in held] == [202, 202, 202]
        over = write(h, run, "4.4")
        body = assert_quota(over, "pending_requests", 3)
        assert "flooder has 3 requests waiting for a decision" in body["reason"]
        retry = int(over.headers["Retry-After"])  # the soonest of the 3 expires by then
        assert 0 < retry <= 30 * 60 and body["retryAfter"] == retry
        # Across runs: the quota is the requester's, not the run's.
        assert_quota(write(h, new_run(h), "4.5"), "pending_requests", 3)
        listed = h.get(f"/v1/runs/{run}/takeover")
        assert listed.headers["X-Total-Count"] == "3"  # nothing of the refused was filed
    assert bench.psu("VOLT? (@1)") not in ("+4.40000000E+00", "+4.50000000E+00")

    tk = held[0].json()["takeover"]
    with bench.http("olga") as h:
        shown = h.get(f"/v1/takeover/{tk['id']}").json()
        denied = h.post(f"/v1/runs/{run}/takeover/{tk['id']}/deny",
                        json={"notes": "not now", "proposalHash": shown["proposalHash"]})
        assert denied.status_code == 200, denied.text
    with bench.http("flooder") as h:  # a decision frees a slot
        assert write(h, run, "1.9").status_code == 202
        assert write(h, run, "2.0").status_code == 429
    with bench.http("olga") as h:  # an operator is exempt
        mine = new_run(h)
        assert [write(h, mine, f"0.{i}").status_code for i in range(5)] == [202] * 5


def test_concurrent_submits_never_overshoot_the_quota(bench: Bench) -> None:
    requester(bench, "burst")
    with bench.http("burst") as h:
        run = new_run(h)
    codes: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(12)

    def submit(i: int) -> None:
        with bench.http("burst") as h:
            barrier.wait(timeout=10)
            status = write(h, run, f"0.{i + 10}").status_code
        with lock:
            codes.append(status)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(codes) == [202] * 3 + [429] * 9
    with bench.http("olga") as h:
        assert h.get(f"/v1/runs/{run}/takeover").headers["X-Total-Count"] == "3"


def test_open_runs_quota_and_closing_a_run(bench: Bench) -> None:
    requester(bench, "runner")
    with bench.http("runner") as h:
        runs = [new_run(h) for _ in range(4)]
        held = write(h, runs[0], "2.2")
        assert held.status_code == 202
        body = assert_quota(h.post("/v1/runs", json={"kind": "script"}), "open_runs", 4)
        assert "POST /v1/runs/{id}/close" in body["reason"] and "retryAfter" not in body
        closed = h.post(f"/v1/runs/{runs[0]}/close")
        assert closed.status_code == 200 and closed.json()["status"] == "closed"
        tk = h.get(f"/v1/takeover/{held.json()['takeover']['id']}").json()
        assert tk["status"] == "cancelled"  # closing a run cancels what it had waiting
        assert h.post("/v1/runs", json={"kind": "script"}).status_code == 201
    with bench.http("bot") as h:  # only the run's requester (or an operator) closes it
        assert h.post(f"/v1/runs/{runs[1]}/close").status_code == 403


def door(bench: Bench) -> Any:
    with bench.http("olga") as h:
        inst = {i["name"]: i for i in h.get("/v1/instruments").json()}
    rm = pyvisa.ResourceManager("@py")  # shared per process: never rm.close() here
    return rm.open_resource(f"TCPIP0::{inst['psu']['doorHost']}::{inst['psu']['doorPort']}"
                            "::SOCKET", read_termination="\n", write_termination="\n",
                            timeout=15_000)


def test_socket_door_reports_the_quota_as_a_scpi_error(bench: Bench) -> None:
    token = requester(bench, "doorman")
    with bench.http("doorman") as h:
        run = new_run(h)
        assert [write(h, run, f"3.{i}").status_code for i in range(3)] == [202] * 3
    psu = door(bench)
    try:
        psu.write(f'GATE:TOK "{token}"')
        psu.write("VOLT 5.1,(@1)")  # refused at once: the stream is not held
        error = psu.query("SYST:ERR?")
        assert error.startswith('-200,"Execution error; doorman has 3 requests waiting'), error
        assert "limits.pending_requests = 3" in error
        assert psu.query("GATE:STAT?") == 'NONE,"",""'  # nothing was held
        assert "E36312A" in psu.query("*IDN?")  # reads still pass
    finally:
        psu.close()
    assert bench.psu("VOLT? (@1)") != "+5.10000000E+00"


async def test_mcp_quota_is_a_tool_error(bench: Bench) -> None:
    requester(bench, "agent")
    with bench.http("agent") as h:
        run = new_run(h)
        assert [write(h, run, f"2.{i}").status_code for i in range(3)] == [202] * 3
    async with http_session(bench, "agent") as client:
        data(await call(client, "set_goal", goal="find the quota"))
        result = await call(client, "scpi_write", instrument="psu", command="VOLT 5.2,(@1)",
                            rationale="one more")
        assert result.is_error
        problem = data(result)
        assert problem["error"] == "quota_exceeded"
        assert "limits.pending_requests = 3" in problem["reason"]


def test_mcp_sessions_quota_answers_429_before_a_session_opens(bench: Bench) -> None:
    token = requester(bench, "sessions")
    with httpx.Client(base_url=bench.url, timeout=30,
                      headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"}) as h:
        opened = [h.post("/mcp", json=INITIALIZE) for _ in range(2)]
        assert [r.status_code for r in opened] == [200, 200], opened[0].text
        sids = [r.headers["mcp-session-id"] for r in opened]
        assert_quota(h.post("/mcp", json=INITIALIZE), "mcp_sessions", 2)
        ended = h.delete("/mcp", headers={"mcp-session-id": sids[0],
                                          "mcp-protocol-version": "2025-06-18"})
        assert ended.status_code < 300, ended.text
        again = h.post("/mcp", json=INITIALIZE)
        assert again.status_code == 200, again.text
        # A request to an open session is never refused by the quota.
        ping = h.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "ping"},
                      headers={"mcp-session-id": sids[1],
                               "mcp-protocol-version": "2025-06-18"})
        assert ping.status_code == 200, ping.text


def test_event_streams_quota(bench: Bench) -> None:
    token = requester(bench, "watcher")
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=bench.url, headers=headers, timeout=30) as h, \
            contextlib.ExitStack() as second_stack:
        reading = []  # kept: a line iterator that is dropped closes its stream
        with contextlib.ExitStack() as first_stack:
            for stack in (first_stack, second_stack):
                stream = stack.enter_context(h.stream("GET", "/v1/events"))
                assert stream.status_code == 200
                reading.append(stream.iter_lines())
                assert next(reading[-1]) == ": connected"
            assert_quota(h.get("/v1/events"), "sse_streams", 2)
        deadline = time.monotonic() + 10  # the server notices a closed stream within ~1 s
        while True:
            with h.stream("GET", "/v1/events") as third:
                if third.status_code == 200:
                    break
                third.read()
            assert time.monotonic() < deadline, "a closed stream's slot never came back"
            time.sleep(0.2)
    with bench.http("olga") as h, contextlib.ExitStack() as stack:  # operators are exempt
        streams = [stack.enter_context(h.stream("GET", "/v1/events")) for _ in range(3)]
        assert [s.status_code for s in streams] == [200] * 3
