"""An MCP tool error never echoes a bench-gate token, whatever argument carried it: a token
given as the instrument's name, inside an argument of the wrong type, at the end of a
command too long, or as the tool's name. Argument errors are clean problems that name the
argument and what it must be, never the value sent (nor a pydantic dump)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ..._http_bench import Bench, start_bench
from .test_mcp import SESSIONS, call, text


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("mcp-tokens"))


def leaks(token: str, shown: str) -> list[str]:
    """Any 10 characters of the token's secret part that show in ``shown``."""
    secret = token.removeprefix("bg_")
    return [secret[i:i + 10] for i in range(len(secret) - 9) if secret[i:i + 10] in shown]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_tool_errors_never_echo_a_token(bench: Bench, transport: str) -> None:
    token = bench.tokens["olga"]  # someone else's token, pasted by mistake
    async with SESSIONS[transport](bench) as client:
        await call(client, "set_goal", goal="tokens in arguments")
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("scpi_write", {"instrument": token, "command": "VOLT 1,(@1)",
                            "rationale": "x"}, "not_found"),
            ("get_state", {"instrument": token}, "not_found"),
            ("scpi_query", {"instrument": token, "command": "*IDN?"}, "not_found"),
            ("emergency_stop", {"instrument": token}, "not_found"),
            ("scpi_write", {"instrument": "psu", "command": [token], "rationale": "x"},
             "invalid_input"),
            ("scpi_write", {"instrument": "psu", "command": "X" * 5000 + token,
                            "rationale": "x"}, "invalid_input"),
            ("request_plan", {"instrument": "psu", "channels": [1], "voltage_min": token,
                              "voltage_max": 5, "current_max": 0.1, "max_writes": 3,
                              "rationale": "x"}, "invalid_input"),
            (token, {}, "unknown_tool"),
        ]
        for tool, args, kind in cases:
            r = await call(client, tool, **args)
            shown = text(r) + repr(r.structured_content)
            assert r.is_error, (tool, r)
            assert leaks(token, shown) == [], (tool, shown)
            assert "Traceback" not in shown and "pydantic" not in shown, shown
            assert r.structured_content is not None and \
                r.structured_content["error"] == kind, (tool, shown)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_an_argument_error_names_the_argument_and_the_rule(bench: Bench,
                                                                 transport: str) -> None:
    async with SESSIONS[transport](bench) as client:
        await call(client, "set_goal", goal="wrong types")
        r = await call(client, "scpi_write", instrument="psu", command=5, rationale="x")
        assert r.is_error and r.structured_content is not None
        assert r.structured_content["error"] == "invalid_input"
        assert "scpi_write" in text(r) and "command" in text(r)
        assert "valid string" in text(r)
        r = await call(client, "wait_for_decision", takeover_id="tk-x", timeout_s=9999)
        assert r.structured_content is not None
        assert "timeout_s" in text(r) and "600" in text(r)
        assert "9999" not in text(r)  # the rule, not the value sent
