"""``bench-gate mcp`` on stdio, line by line: a line that is not a JSON-RPC message is
answered with a JSON-RPC error (the SDK passes it on as an exception and nothing answers),
and the end of input reaches the SDK only once every request read has its answer (the SDK
cancels the calls still in flight at the end of input, unanswered)."""

from __future__ import annotations

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from mcp_types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCRequest,
    JSONRPCResponse,
)
from pydantic import ValidationError

__all__ = ["DRAIN_SECONDS", "InFlight", "answer_bad_lines", "bad_line", "pass_answers"]


#: After the end of input, how long the calls still in flight have to answer.
DRAIN_SECONDS = 10.0


class InFlight:
    """The requests read from stdin and not yet answered on stdout."""

    def __init__(self) -> None:
        self.open: set[str | int] = set()
        self.idle = anyio.Event()
        self.idle.set()
        #: Set once every answer the SDK wrote has been passed on to stdout.
        self.passed = anyio.Event()

    def asked(self, message: object) -> None:
        if isinstance(message, JSONRPCRequest):
            if not self.open:  # the first one in flight: busy until it is answered
                self.idle = anyio.Event()
            self.open.add(message.id)

    def answered(self, message: object) -> None:
        if isinstance(message, JSONRPCResponse | JSONRPCError) and message.id is not None:
            self.open.discard(message.id)
            if not self.open:
                self.idle.set()


def bad_line(exc: Exception) -> JSONRPCError:
    """The JSON-RPC error for a line that is not a message: -32700 when it is not JSON
    (nor UTF-8), -32600 when it is JSON but no message. The rule, never the line."""
    invalid = isinstance(exc, ValidationError) and any(
        e["type"] == "json_invalid" for e in exc.errors(include_input=False))
    code, what = (PARSE_ERROR, "Parse error: a line that is not JSON") if invalid else (
        INVALID_REQUEST, "Invalid Request: a JSON line that is not one JSON-RPC 2.0 message "
        "(a request, notification or response object)")
    return JSONRPCError(jsonrpc="2.0", id=None,
                        error=ErrorData(code=code, message=f"{what}; it was ignored"))


async def answer_bad_lines(read: MemoryObjectReceiveStream[SessionMessage | Exception],
                           messages: MemoryObjectSendStream[SessionMessage | Exception],
                           write: MemoryObjectSendStream[SessionMessage],
                           flight: InFlight) -> None:
    """Hand each message of ``read`` on to ``messages``; answer each line that was none.
    At the end of input, ``messages`` ends once every request handed on is answered."""
    async with read, messages:
        async for item in read:
            if isinstance(item, Exception):
                await _tell(write, SessionMessage(bad_line(item)))
            else:
                flight.asked(item.message)
                await messages.send(item)
        with anyio.move_on_after(DRAIN_SECONDS):
            await flight.idle.wait()


async def pass_answers(outgoing: MemoryObjectReceiveStream[SessionMessage],
                       write: MemoryObjectSendStream[SessionMessage],
                       flight: InFlight) -> None:
    """What the SDK writes, on to stdout, noting each answer. Once stdout is gone (nobody
    reads), the rest is taken and dropped, so the SDK never waits on a write."""
    try:
        async with outgoing:
            async for item in outgoing:
                await _tell(write, item)
                flight.answered(item.message)
    finally:
        flight.passed.set()


async def _tell(write: MemoryObjectSendStream[SessionMessage], item: SessionMessage) -> None:
    """``item`` to stdout; dropped once stdout's writer has ended (nobody reads it)."""
    try:
        await write.send(item)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass  # the client cannot read any more: nothing to tell it
