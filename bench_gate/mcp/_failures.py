"""Tool errors as the agent reads them: a :class:`ToolFailure` becomes a tool error
carrying a :class:`Problem`, and so do the SDK's own refusals (an unknown tool, arguments
that fail the tool's schema), which it would otherwise answer with a pydantic dump that
repeats the value sent. Before the SDK, a call is checked against the tool's published
schema (``_arguments``): an argument it does not take, or of another JSON type, is
refused. An argument error names the argument and its rule, never the value; no text of
any tool error carries a token (``texts.redact``)."""

from __future__ import annotations

import logging
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import (
    CallToolResult,
    TextContent,
)
from pydantic import ValidationError

from ..texts import redact
from ._arguments import ToolArguments
from ._backend import ToolFailure
from ._lines import DRAIN_SECONDS, InFlight, answer_bad_lines, pass_answers
from ._results import Problem

__all__ = ["GateServer", "problem"]

logger = logging.getLogger(__name__)


def problem(exc: ToolFailure) -> CallToolResult:
    code = f" (SCPI {exc.scpi_code})" if exc.scpi_code is not None else ""
    text = f"{exc.error}{code}: {exc.reason}" + (f" [next: {exc.hint}]" if exc.hint else "")
    body = Problem(error=exc.error, reason=exc.reason, scpi_code=exc.scpi_code, hint=exc.hint)
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content=body.model_dump(mode="json", by_alias=True),
                          is_error=True)


def refusal(tool: str, known: list[str], exc: ToolError) -> ToolFailure:
    """The SDK's refusal of a call, as a clean failure: which argument breaks which rule."""
    cause = exc.__cause__
    if isinstance(cause, ValidationError):
        rules = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
            for e in cause.errors(include_url=False, include_input=False, include_context=False))
        return ToolFailure("invalid_input", f"{tool}: {rules}", hint=f"the schema of {tool}")
    if tool not in known:
        return ToolFailure("unknown_tool", f"no tool {tool!r}; the tools are "
                           f"{', '.join(sorted(known))}", hint="tools/list")
    return ToolFailure("failed", f"{tool}: {exc}")


class GateServer(MCPServer):
    """The MCP server whose every tool error is a clean, token-free :class:`Problem`."""

    _arguments: ToolArguments | None = None

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None) -> Any:
        if self._arguments is None:  # the tools are all registered before the first call
            self._arguments = ToolArguments({t.name: t.input_schema
                                             for t in await self.list_tools()})
        refused = self._arguments.refusal(name, arguments or {})
        if refused is not None:
            return problem(refused)
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError as exc:  # a crash: its text stays in the server's log
            logger.error("tool %r crashed", name, exc_info=exc.__cause__ or exc)
            return problem(ToolFailure(
                "internal_error", f"{name} failed inside bench-gate (a bug, in the server's "
                "log); what it did is not known here: check with get_state or "
                "wait_for_decision before going on"))
        except ToolError as exc:
            known = [t.name for t in await self.list_tools()]
            return problem(refusal(redact(name) or name, known, exc))

    async def run_stdio_async(self) -> None:
        """The SDK's stdio server, with every line that is not a JSON-RPC message answered
        (``answer_bad_lines``): the SDK passes it on as an exception and nothing answers.
        At the end of input the SDK cancels the calls still in flight, unanswered: the end
        reaches it only once each request read has its answer (``InFlight``), or after
        ``DRAIN_SECONDS``; a client that pipes its requests and closes stdin at once still
        reads every answer."""
        async with stdio_server() as (read, write), anyio.create_task_group() as tg:
            messages, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            answers, outgoing = anyio.create_memory_object_stream[SessionMessage](0)
            flight = InFlight()
            tg.start_soon(answer_bad_lines, read, messages, write, flight)
            tg.start_soon(pass_answers, outgoing, write, flight)
            low = self._lowlevel_server
            await low.run(receive, answers, low.create_initialization_options())
            with anyio.move_on_after(DRAIN_SECONDS):  # the answers the SDK wrote last
                await flight.passed.wait()
            tg.cancel_scope.cancel()
            write.close()  # stdout's writer ends with it (the SDK closed only ours)
