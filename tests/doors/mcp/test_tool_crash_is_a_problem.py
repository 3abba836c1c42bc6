"""A tool that crashes (a bug) is a tool error with a structured problem the agent can act
on, ``internal_error``, saying what it does not know; never the exception's text (which may
hold anything, a token included) nor a traceback."""

from __future__ import annotations

from typing import Any

from mcp import Client

from bench_gate.mcp import AgentSession, build_server

SECRET = "bg_" + "s3cr3t" * 6


class Crashing:
    """A bench whose every call is a bug."""

    def __getattr__(self, name: str) -> Any:
        async def crash(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"{name} blew up holding {SECRET}")
        return crash


async def test_a_crash_is_an_internal_error_problem() -> None:
    session = AgentSession(Crashing())  # type: ignore[arg-type]

    async def session_for(ctx: Any) -> AgentSession:
        return session

    async with Client(build_server(session_for)) as client:
        r = await client.call_tool("list_instruments", {})
    text = " ".join(getattr(c, "text", "") for c in r.content)
    assert r.is_error
    assert r.structured_content is not None, text
    assert r.structured_content["error"] == "internal_error"
    assert "list_instruments" in text and "get_state" in text
    assert "blew up" not in text and SECRET[3:] not in text and "Traceback" not in text
