"""Tools called with arguments they do not take: refused (``invalid_input``, naming each
unknown argument and the ones the tool takes), never run with the unknown ones dropped. An
agent that says ``output_enabled=True`` or ``wait_seconds=600`` means something; a write or
a plan that runs without it is not the one it asked for."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from ..._http_bench import Bench, start_bench

PLAN: dict[str, Any] = {"instrument": "psu", "channels": [1], "voltage_min": 0,
                        "voltage_max": 2, "current_max": 0.2, "max_writes": 3,
                        "rationale": "ramp CH1"}


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("mcp-hostile"))


@asynccontextmanager
async def session(bench: Bench) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {bench.tokens['bot']}"},
                              timeout=httpx2.Timeout(30, read=120))
    async with http, Client(streamable_http_client(f"{bench.url}/mcp", http_client=http),
                            read_timeout_seconds=60) as client:
        yield client


def held(bench: Bench, run: str) -> list[dict[str, Any]]:
    with bench.http("olga") as h:
        r = h.get(f"/v1/runs/{run}/takeover")
        assert r.status_code == 200, r.text
        rows: list[dict[str, Any]] = r.json()
        return rows


@pytest.mark.parametrize(("tool", "args", "extra"), [
    ("scpi_write", {"instrument": "psu", "command": "VOLT 1.5,(@1)", "rationale": "r"},
     {"wait_seconds": 600}),
    ("scpi_write", {"instrument": "psu", "command": "VOLT 1.5,(@1)", "rationale": "r"},
     {"channel": 2, "dry_run": True}),
    ("request_plan", PLAN, {"output_enabled": True}),
    ("request_plan", PLAN, {"voltage": [0, 5]}),
    ("scpi_query", {"instrument": "psu", "command": "MEAS:VOLT? (@1)"}, {"timeout": 1}),
    ("wait_for_decision", {"takeover_id": "tk-none"}, {"wait_seconds": 1}),
    ("emergency_stop", {"instrument": "psu"}, {"channel": 1}),
    ("set_goal", {"goal": "hostile tool arguments"}, {"goal_id": "x"}),
])
async def test_an_unknown_argument_is_refused_and_nothing_runs(
        bench: Bench, tool: str, args: dict[str, Any], extra: dict[str, Any]) -> None:
    async with session(bench) as client:
        goal = await client.call_tool("set_goal", {"goal": "hostile tool arguments"})
        assert not goal.is_error, goal
        assert goal.structured_content is not None
        run = str(goal.structured_content["runId"])
        r = await client.call_tool(tool, {**args, **extra})
        text = " ".join(getattr(c, "text", "") for c in r.content)
        assert r.is_error, text
        assert r.structured_content is not None, text
        assert r.structured_content["error"] == "invalid_input", text
        for name in extra:
            assert name in text, text
        for name in args:
            assert name in text, text  # the arguments it does take
        assert held(bench, run) == []
        # The same call without the unknown argument still works (the session is fine).
        if tool == "scpi_query":
            ok = await client.call_tool(tool, args)
            assert not ok.is_error, ok
    with bench.http("olga") as h:
        assert h.get("/v1/bench/stop").json()["stopped"] in ([], {})
    assert float(await anyio.to_thread.run_sync(bench.psu, "VOLT? (@1)")) == 0.0


QUESTION: dict[str, Any] = {"text": "which?", "options": [{"label": "a"}, {"label": "b"}]}


@pytest.mark.parametrize(("tool", "args", "wrong"), [
    ("request_plan", PLAN, {"output_enable": "yes"}),
    ("request_plan", PLAN, {"output_enable": 1}),
    ("request_plan", PLAN, {"max_writes": True}),
    ("request_plan", PLAN, {"max_writes": "3"}),
    ("request_plan", PLAN, {"channels": [True]}),
    ("request_plan", PLAN, {"channels": "[1]"}),
    ("request_plan", PLAN, {"voltage_max": True}),
    ("request_plan", PLAN, {"timeout_minutes": "30"}),
    ("scpi_write", {"instrument": "psu", "command": "VOLT 1.5,(@1)", "rationale": "r"},
     {"step_id": 7}),
    ("ask_operator", {"questions": [QUESTION], "wait_s": 0},
     {"questions": [{**QUESTION, "allow_free_text": "yes"}]}),
    ("ask_operator", {"questions": [QUESTION], "wait_s": 0},
     {"questions": [{**QUESTION, "allow_free_text": 1}]}),
    ("ask_operator", {"questions": [QUESTION], "wait_s": 0},
     {"questions": [{**QUESTION, "allowFreeText": True}]}),
    ("ask_operator", {"questions": [QUESTION], "wait_s": 0},
     {"questions": [{**QUESTION, "options": [{"label": "a", "hint": "x"}, {"label": "b"}]}]}),
    ("ask_operator", {"questions": [QUESTION], "wait_s": 0}, {"timeout_minutes": True}),
])
async def test_an_argument_of_the_wrong_json_type_is_refused_and_nothing_is_asked(
        bench: Bench, tool: str, args: dict[str, Any], wrong: dict[str, Any]) -> None:
    """``"yes"`` or ``1`` is not the boolean true, ``true`` not the count 1, ``"3"`` not a
    number: the SDK would read each as the value it resembles (a plan asking to switch the
    output on, one write), so they are refused against the tool's published schema."""
    with bench.http("olga") as h:
        questions = h.get("/v1/questions").json()
    async with session(bench) as client:
        goal = await client.call_tool("set_goal", {"goal": "wrong types"})
        assert goal.structured_content is not None
        run = str(goal.structured_content["runId"])
        r = await client.call_tool(tool, {**args, **wrong})
        text = " ".join(getattr(c, "text", "") for c in r.content)
        assert r.is_error, text
        assert r.structured_content is not None, text
        assert r.structured_content["error"] == "invalid_input", text
        assert next(iter(wrong)) in text, text
        for value in ("yes", "[1]"):
            assert repr(value) not in text  # the rule, never the value sent
        assert held(bench, run) == []
        # The right types are taken, in the same session.
        ok = await client.call_tool(tool, args)
        assert not ok.is_error, ok
    with bench.http("olga") as h:
        after = h.get("/v1/questions").json()
        assert len(after) == len(questions) + (tool == "ask_operator")
