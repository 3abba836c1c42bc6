"""MCP, end to end with the SDK's client: over stdio (``bench-gate mcp --url``, a real
subprocess against a real server) and over streamable HTTP (``/mcp`` on a ServerThread)."""

from __future__ import annotations

import re
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from ..._http_bench import Bench, start_bench

TOOLS = {"set_goal", "list_instruments", "get_state", "scpi_query", "scpi_write",
         "wait_for_decision", "request_plan", "ask_operator", "wait_for_answer",
         "emergency_stop"}
BENCH_GATE = str(Path(sys.executable).parent / "bench-gate")


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("mcp"))


@asynccontextmanager
async def stdio_session(bench: Bench, who: str = "bot") -> AsyncIterator[Client]:
    params = StdioServerParameters(command=BENCH_GATE, args=["mcp", "--url", bench.url],
                                   env={"BENCH_GATE_TOKEN": bench.tokens[who]})
    async with Client(params, read_timeout_seconds=60) as client:
        yield client


@asynccontextmanager
async def http_session(bench: Bench, who: str = "bot") -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {bench.tokens[who]}"},
                              timeout=httpx2.Timeout(30, read=300))
    async with http, Client(streamable_http_client(f"{bench.url}/mcp", http_client=http),
                            read_timeout_seconds=60) as client:
        yield client


SESSIONS = {"stdio": stdio_session, "http": http_session}


async def call(client: Client, tool: str, **args: Any) -> CallToolResult:
    return await client.call_tool(tool, args)


def data(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, result
    return result.structured_content


def text(result: CallToolResult) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


async def operator(bench: Bench, method: str, path: str, who: str = "olga",
                   **kw: Any) -> dict[str, Any]:
    def go() -> dict[str, Any]:
        with bench.http(who) as h:
            r = h.request(method, path, **kw)
            assert r.status_code < 400, r.text
            body: dict[str, Any] = r.json()
            return body
    return await anyio.to_thread.run_sync(go)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_session_query_write_grant_deny_ask(bench: Bench, transport: str) -> None:
    async with SESSIONS[transport](bench) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == TOOLS
        decisions = {t for t in tools if re.search(r"grant|approve|deny|decide", t)}
        assert not decisions, f"MCP must offer no decision tools: {decisions}"
        for name in ("scpi_query", "get_state", "list_instruments", "wait_for_decision"):
            ann = tools[name].annotations
            assert ann is not None and ann.read_only_hint is True
        ann = tools["scpi_write"].annotations
        assert ann is not None and ann.read_only_hint is False and ann.destructive_hint is True
        assert all(t.output_schema for t in tools.values())
        # The API's vocabulary: every output field camelCase (issue 19), arguments as named.
        props = [p for t in tools.values() for s in [t.output_schema or {},
                 *(t.output_schema or {}).get("$defs", {}).values()]
                 for p in s.get("properties", {})]
        assert props and all("_" not in p for p in props), props

        early = await call(client, "scpi_write", instrument="psu", command="VOLT 1,(@1)",
                           rationale="too soon")
        assert early.is_error and data(early)["error"] == "no_goal"
        goal = data(await call(client, "set_goal", goal=f"characterize the DUT ({transport})"))
        run_id = goal["runId"]

        names = [i["name"] for i in data(await call(client, "list_instruments"))["instruments"]]
        assert "psu" in names
        state = data(await call(client, "get_state", instrument="psu"))
        assert "E36312A" in state["idn"] and "1" in state["channels"]

        q = await call(client, "scpi_query", instrument="psu", command="MEAS:VOLT? (@1)")
        assert not q.is_error, text(q)
        assert data(q)["runId"] == run_id and text(q) == data(q)["response"]
        float(data(q)["response"])

        w = await call(client, "scpi_write", instrument="psu", command="VOLT 4.25,(@1)",
                       rationale="bias the DUT at 4.25 V", confidence=0.8, step_id="s1")
        out = data(w)
        assert out["status"] == "pending", text(w)
        tk = out["takeoverId"]
        assert out["pending"]["approvalsMissing"] == ["setpoint"]
        assert out["pending"]["operatorSees"]["command"] == "VOLT 4.25,(@1)"
        assert out["pending"]["operatorSees"]["proposalHash"]
        assert out["pending"]["expiresAt"].endswith("Z")
        assert "wait_for_decision" in text(w)
        assert bench.psu("VOLT? (@1)") != "4.25"

        still = data(await call(client, "wait_for_decision", takeover_id=tk, timeout_s=0.2))
        assert still["status"] == "pending"
        shown = await operator(bench, "GET", f"/v1/takeover/{tk}")
        await operator(bench, "POST", f"/v1/runs/{run_id}/takeover/{tk}/grant",
                       json={"approve": ["setpoint"], "notes": "fine",
                             "proposalHash": shown["proposalHash"]})
        d = await call(client, "wait_for_decision", takeover_id=tk, timeout_s=20)
        done = data(d)
        assert done["status"] == "executed", text(d)
        assert done["receipt"]["sent"] == ["VOLT 4.25,(@1)"]
        assert done["receipt"]["approvals"][0]["by"] == "olga"
        assert float(bench.psu("VOLT? (@1)")) == 4.25

        w2 = data(await call(client, "scpi_write", instrument="psu", command="VOLT 5.5,(@1)",
                             rationale="more headroom"))
        assert w2["status"] == "pending"

        async def deny_soon() -> None:
            await anyio.sleep(0.3)
            shown = await operator(bench, "GET", f"/v1/takeover/{w2['takeoverId']}")
            await operator(bench, "POST",
                           f"/v1/runs/{run_id}/takeover/{w2['takeoverId']}/deny",
                           json={"notes": "too close to the DUT's 6 V rating",
                                 "proposalHash": shown["proposalHash"]})

        async with anyio.create_task_group() as tg:
            tg.start_soon(deny_soon)
            denied = await call(client, "wait_for_decision", takeover_id=w2["takeoverId"],
                                timeout_s=20)
        assert data(denied)["status"] == "denied"
        assert data(denied)["notes"] == "too close to the DUT's 6 V rating"
        assert "too close to the DUT's 6 V rating" in text(denied)

        asked = await call(client, "ask_operator", wait_s=0, questions=[
            {"text": "Which channel feeds the DUT?",
             "options": [{"label": "CH1"}, {"label": "CH2", "description": "the 25 V one"}]},
            {"text": "Current limit?", "options": [{"label": "0.1 A"}, {"label": "0.5 A"}],
             "allow_free_text": True}])
        a = data(asked)
        assert a["status"] == "open", text(asked)
        listed = await anyio.to_thread.run_sync(lambda: _open_questions(bench))
        assert a["questionId"] in listed

        async def answer_soon() -> None:
            await anyio.sleep(0.3)
            await operator(bench, "POST", f"/v1/questions/{a['questionId']}/answer",
                           json={"answers": [{"choice": "ch2"}, {"text": "0.2 A, not more"}],
                                 "notes": "careful"})

        async with anyio.create_task_group() as tg:
            tg.start_soon(answer_soon)
            got = await call(client, "wait_for_answer", question_id=a["questionId"],
                             timeout_s=20)
        g = data(got)
        assert g["status"] == "answered" and g["answeredBy"] == "olga"
        assert g["answers"] == [{"choice": "CH2", "text": None},
                                {"choice": None, "text": "0.2 A, not more"}]
        assert "CH2" in text(got) and "0.2 A, not more" in text(got)

    journal = await operator(bench, "GET", f"/v1/runs/{run_id}/journal",
                             params={"limit": 1000})
    kinds = [e["type"] for e in journal["events"]]
    assert kinds[0] == "run_created" and "question_asked" in kinds
    assert "question_answered" in kinds
    run = await operator(bench, "GET", f"/v1/runs/{run_id}")
    assert run["kind"] == "agent" and run["goal"] == f"characterize the DUT ({transport})"


def _open_questions(bench: Bench) -> list[str]:
    with bench.http("olga") as h:
        return [q["id"] for q in h.get("/v1/questions", params={"status": "open"}).json()]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_bad_inputs_are_clean_tool_errors(bench: Bench, transport: str) -> None:
    async with SESSIONS[transport](bench) as client:
        await call(client, "set_goal", goal="bad inputs")
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("scpi_query", {"instrument": "psu", "command": "VOLT? (@1"}, "refused"),
            ("scpi_write", {"instrument": "psu", "command": "VOLT 5,(@1",
                            "rationale": "x"}, "refused"),
            ("scpi_query", {"instrument": "nope", "command": "*IDN?"}, "not_found"),
            ("get_state", {"instrument": "nope"}, "not_found"),
            ("scpi_write", {"instrument": "psu", "command": "VOLT 30,(@1)",
                            "rationale": "x"}, "refused"),
            ("scpi_query", {"instrument": "psu", "command": "VOLT 1,(@1)"}, "not_read_only"),
            ("wait_for_decision", {"takeover_id": "tk-none", "timeout_s": 0}, "not_found"),
            ("set_goal", {"goal": "another goal"}, "conflict"),
        ]
        for tool, args, kind in cases:
            r = await call(client, tool, **args)
            assert r.is_error, (tool, args, r)
            assert data(r)["error"] == kind, (tool, args, text(r))
            assert data(r)["reason"] in text(r)
        envelope = await call(client, "scpi_write", instrument="psu", command="VOLT 30,(@1)",
                              rationale="x")
        assert data(envelope)["scpiCode"] is not None
        assert "scpi_write" in text(await call(client, "scpi_query", instrument="psu",
                                               command="OUTP ON,(@1)"))
        for tool, args in [("scpi_write", {"instrument": "psu", "command": "VOLT 1,(@1)"}),
                           ("scpi_write", {"instrument": "psu", "command": "VOLT 1,(@1)",
                                           "rationale": "x", "confidence": 2}),
                           ("wait_for_decision", {"takeover_id": "tk", "timeout_s": 9999}),
                           ("ask_operator", {"questions": [{"text": "one option?",
                                                            "options": [{"label": "a"}]}]})]:
            r = await call(client, tool, **args)
            assert r.is_error, (tool, args, r)
            assert tool in text(r)


async def test_http_endpoint_needs_a_token(bench: Bench) -> None:
    async with httpx.AsyncClient(base_url=bench.url) as h:
        r = await h.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert r.status_code == 401
        assert r.headers["content-type"] == "application/problem+json"
        r = await h.post("/mcp", headers={"Authorization": "Bearer bg_wrong"},
                         json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert r.status_code == 401


async def test_http_session_end_closes_its_run(bench: Bench) -> None:
    async with http_session(bench) as client:
        run_id = data(await call(client, "set_goal", goal="leave early"))["runId"]
        w = data(await call(client, "scpi_write", instrument="psu", command="VOLT 2,(@2)",
                            rationale="then leave"))
        asked = data(await call(client, "ask_operator", wait_s=0, questions=[
            {"text": "ok?", "options": [{"label": "yes"}, {"label": "no"}]}]))
    for _ in range(50):
        tk = await operator(bench, "GET", f"/v1/takeover/{w['takeoverId']}")
        if tk["status"] == "cancelled":
            break
        await anyio.sleep(0.1)
    assert tk["status"] == "cancelled"
    q = await operator(bench, "GET", f"/v1/questions/{asked['questionId']}")
    assert q["status"] == "cancelled"
    run = await operator(bench, "GET", f"/v1/runs/{run_id}")
    assert run["status"] == "closed"


async def test_http_session_belongs_to_its_token(bench: Bench) -> None:
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}}
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=bench.url, timeout=30) as h:
        r = await h.post("/mcp", json=init, headers={
            **accept, "Authorization": f"Bearer {bench.tokens['bot']}"})
        assert r.status_code == 200, r.text
        sid = r.headers["mcp-session-id"]
        other = await h.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                             headers={**accept, "Mcp-Session-Id": sid,
                                      "MCP-Protocol-Version": "2025-11-25",
                                      "Authorization": f"Bearer {bench.tokens['bot2']}"})
        assert other.status_code == 404


async def test_http_stateless_client_gets_no_session(bench: Bench) -> None:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {bench.tokens['bot']}"},
                              timeout=httpx2.Timeout(30, read=300))
    async with http, Client(streamable_http_client(f"{bench.url}/mcp", http_client=http),
                            mode="2026-07-28") as client:
        r = await call(client, "set_goal", goal="stateless")
        assert r.is_error and data(r)["error"] == "no_session"


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_request_plan_comes_back_pending(bench: Bench, transport: str) -> None:
    async with SESSIONS[transport](bench) as client:
        await call(client, "set_goal", goal="sweep CH1")
        r = await call(client, "request_plan", instrument="psu", channels=[1], voltage_min=0,
                       voltage_max=5, current_max=0.1, max_writes=10, max_step=0.5,
                       rationale="a 0-5 V sweep in 0.5 V steps")
        out = data(r)
        assert out["status"] == "pending", text(r)
        assert out["planId"] and out["pending"]["requiredApprovals"] == ["setpoint"]
        assert "plan" in out["pending"]["operatorSees"]
        wide = await call(client, "request_plan", instrument="psu", channels=[1],
                          voltage_min=0, voltage_max=500, current_max=0.1, max_writes=10,
                          rationale="too wide")
        assert wide.is_error and data(wide)["error"] == "invalid_input", text(wide)


def test_the_tools_table_of_docs_mcp_md_is_the_server_s() -> None:
    """docs/mcp.md's table of tools names each tool the server lists (``TOOLS``, checked
    against ``tools/list`` above) once; it left out ``emergency_stop``."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "mcp.md").read_text(encoding="utf-8")
    table = doc.split("## Tools", 1)[1].split("\n\n", 2)[1]
    named = re.findall(r"^\| `(\w+)\(", table, re.M)
    assert sorted(named) == sorted(TOOLS)
