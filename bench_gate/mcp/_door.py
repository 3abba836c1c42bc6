"""Streamable HTTP MCP on the main server (``/mcp``), authenticated with the bearer token.

Each MCP session (``Mcp-Session-Id``) is one run of kind ``agent`` for the token's principal,
on the gateway core in-process. The SDK refuses a session presented with another token.
When the session ends (the client's DELETE, the idle timeout, shutdown) its run is closed:
pending requests are cancelled and open questions get no answer.

The endpoint serves the session-based protocol: it answers ``server/discover`` with
"method not found", so an ``auto`` client falls back to the ``initialize`` handshake. It
answers each POST with one JSON body, not an SSE stream (the tools send no progress
notifications; a query round trip takes about 7 ms instead of 18).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from mcp_types import METHOD_NOT_FOUND
from starlette.types import Receive, Scope, Send

from ..auth import Tokens
from ..gateway import Gateway
from ..models import Principal
from ._backend import ToolFailure
from ._core import CoreBench
from ._server import AgentSession, build_server

__all__ = ["PRINCIPAL_KEY", "McpDoor"]

PRINCIPAL_KEY = "bench_gate.principal"


async def _session_protocol_only(ctx: ServerRequestContext[Any, Any],
                                 call_next: CallNext) -> HandlerResult:
    if ctx.method == "server/discover":
        raise MCPError(METHOD_NOT_FOUND, "this endpoint keeps one run per MCP session: "
                       "use the initialize handshake")
    return await call_next(ctx)


async def _unauthorized(send: Send, reason: str) -> None:
    body = json.dumps({"type": "https://bench-gate.dev/problems/401", "title": "Unauthorized",
                       "status": 401, "detail": reason, "reason": reason}).encode()
    await send({"type": "http.response.start", "status": 401, "headers": [
        (b"content-type", b"application/problem+json"),
        (b"www-authenticate", b'Bearer realm="bench-gate"'),
        (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class McpDoor:
    """An ASGI app for ``/mcp`` plus :meth:`running`, the lifespan of its sessions."""

    def __init__(self, gateway: Gateway, tokens: Tokens, *, host: str = "127.0.0.1") -> None:
        self.gateway = gateway
        self.tokens = tokens
        self.sessions: dict[str, AgentSession] = {}
        self.server = build_server(self._session_for)
        self.server.middleware.append(_session_protocol_only)
        self.server.streamable_http_app(host=host, json_response=True)  # the session manager
        self.manager = self.server.session_manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        header = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
        kind, _, token = header.partition(" ")
        if kind.lower() != "bearer" or not token.strip():
            await _unauthorized(send, "a bearer token is required (Authorization: Bearer bg_...)")
            return
        who = self.tokens.verify(token.strip())
        if who is None:
            await _unauthorized(send, "the token is not valid or was revoked")
            return
        user = AuthenticatedUser(AccessToken(token="", client_id=who.name, subject=who.name,
                                             scopes=[who.role.value]))
        await self.manager.handle_request({**scope, "user": user, PRINCIPAL_KEY: who},
                                          receive, send)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve sessions until the block ends; then close the runs still open."""
        try:
            async with self.manager.run():
                yield
        finally:
            for sid in list(self.sessions):
                await self._end(sid)

    async def _end(self, session_id: str) -> None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            with contextlib.suppress(ToolFailure):
                await session.close()

    async def _session_for(self, ctx: Context) -> AgentSession:
        request = ctx.request_context.request
        scope: dict[str, Any] = getattr(request, "scope", None) or {}
        who: Principal | None = scope.get(PRINCIPAL_KEY)
        headers = ctx.headers or {}
        sid = headers.get("mcp-session-id")
        if who is None or sid is None:
            raise ToolFailure("no_session", "this endpoint keeps one run per MCP session; "
                              "connect with the session-based protocol (initialize)")
        session = self.sessions.get(sid)
        if session is None:
            session = AgentSession(CoreBench(self.gateway, who))
            self.sessions[sid] = session
            # The connection's teardown ends the session's run (SDK-internal attribute).
            connection = getattr(ctx.request_context.session, "_connection", None)
            if connection is not None:
                connection.exit_stack.push_async_callback(self._end, sid)
        return session
