"""Streamable HTTP MCP on the main server (``/mcp``), authenticated with the bearer token.

Each MCP session (``Mcp-Session-Id``) is one run of kind ``agent`` for the token's principal,
on the gateway core in-process. The SDK refuses a session presented with another token.
When the session ends (the client's DELETE, the idle timeout, shutdown) its run is closed:
pending requests are cancelled and open questions get no answer.

A requester may hold ``limits.mcp_sessions`` sessions at once: one more is refused with 429
before it opens. Revoking the token a session was opened with ends the session at once (or
within ``auth.RECHECK_SECONDS`` when another process revoked it) and cancels its requests.

The endpoint serves the session-based protocol: it answers ``server/discover`` with
"method not found", so an ``auto`` client falls back to the ``initialize`` handshake. It
answers each POST with one JSON body, not an SSE stream (the tools send no progress
notifications; a query round trip takes about 7 ms instead of 18).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from mcp_types import METHOD_NOT_FOUND
from starlette.types import Message, Receive, Scope, Send

from ..auth import Tokens
from ..errors import GatewayError, QuotaExceeded, StoreError
from ..gateway import Gateway
from ..models import Principal
from ..quotas import Lease, Quota, lease
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


async def _problem(send: Send, status: int, title: str, kind: str, reason: str,
                   headers: list[tuple[bytes, bytes]], **extra: Any) -> None:
    body = json.dumps({"type": f"https://bench-gate.dev/problems/{kind}", "title": title,
                       "status": status, "detail": reason, "reason": reason,
                       **extra}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/problem+json"), *headers,
        (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _unauthorized(send: Send, reason: str) -> None:
    await _problem(send, 401, "Unauthorized", "401", reason,
                   [(b"www-authenticate", b'Bearer realm="bench-gate"')])


async def _too_many(send: Send, exc: QuotaExceeded) -> None:
    extra: dict[str, Any] = {"quota": exc.quota, "limit": exc.limit}
    headers = []
    if exc.retry_after is not None:
        extra["retryAfter"] = math.ceil(exc.retry_after)
        headers.append((b"retry-after", str(math.ceil(exc.retry_after)).encode()))
    await _problem(send, 429, "Too Many Requests", "quota-exceeded", exc.message, headers,
                   **extra)


@dataclass(eq=False)
class _Opened:
    """A session this door let open: whose it is, its quota lease, its token watch."""

    who: Principal
    held: Lease
    unwatch: Callable[[], None]

    def drop(self) -> None:
        self.held.release()
        self.unwatch()


class McpDoor:
    """An ASGI app for ``/mcp`` plus :meth:`running`, the lifespan of its sessions."""

    def __init__(self, gateway: Gateway, tokens: Tokens, *, host: str = "127.0.0.1") -> None:
        self.gateway = gateway
        self.tokens = tokens
        self.sessions: dict[str, AgentSession] = {}
        #: Every session opened through this door (a tool call or not), by session id.
        self.opened: dict[str, _Opened] = {}
        self._ending: set[asyncio.Task[None]] = set()
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
        known = b"mcp-session-id" in dict(scope.get("headers") or [])
        try:
            # An open session's token, verified when it opened, is taken while the store
            # is away: its emergency_stop never waits for the store (other tools do).
            who = (self.tokens.verify_for_stop if known else self.tokens.verify)(
                token.strip())
        except StoreError as exc:  # not a 500 with a traceback
            await _problem(send, 503, "Service Unavailable", "store-error", exc.message, [])
            return
        if who is None:
            await _unauthorized(send, "the token is not valid or was revoked")
            return
        user = AuthenticatedUser(AccessToken(token="", client_id=who.name, subject=who.name,
                                             scopes=[who.role.value]))
        scope = {**scope, "user": user, PRINCIPAL_KEY: who}
        if known:
            await self.manager.handle_request(scope, receive, send)
            return
        await self._open(scope, receive, send, who, token.strip())

    async def _open(self, scope: Scope, receive: Receive, send: Send, who: Principal,
                    token: str) -> None:
        """A request that may open a session: within the requester's quota (the lease is
        taken before the SDK admits it, so concurrent openings count too), and watched for
        the revocation of its token once it is open."""
        self._forget_ended()
        try:
            held = lease(self.gateway, who, Quota.MCP_SESSIONS)
        except QuotaExceeded as exc:
            await _too_many(send, exc)
            return
        opened: list[str] = []

        async def watching(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                opened.extend(v.decode("latin-1") for k, v in message.get("headers", ())
                              if k.lower() == b"mcp-session-id")
            await send(message)

        try:
            await self.manager.handle_request(scope, receive, watching)
        finally:
            if not opened:
                held.release()
        if opened:
            sid = opened[0]
            self.opened[sid] = _Opened(who, held, self.tokens.watch(
                token, lambda: self._spawn_revoked(sid)))

    def _live(self) -> set[str] | None:
        """The session ids the SDK still serves (an SDK-internal attribute; None if this
        SDK version has no such thing)."""
        instances = getattr(self.manager, "_server_instances", None)
        return set(instances) if isinstance(instances, dict) else None

    def _forget_ended(self) -> None:
        """Give back the leases of sessions the SDK ended without a tool call (an idle
        timeout, a DELETE)."""
        live = self._live()
        if live is None:
            return
        for sid in [s for s in self.opened if s not in live]:
            self.opened.pop(sid).drop()

    def _spawn_revoked(self, sid: str) -> None:
        task = asyncio.ensure_future(self._revoked(sid))
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)

    async def _revoked(self, sid: str) -> None:
        """The session's token was revoked: cancel what its run holds, end the session."""
        opened = self.opened.pop(sid, None)
        if opened is not None:
            opened.drop()
        session = self.sessions.pop(sid, None)
        if session is not None and session.run_id is not None:
            with contextlib.suppress(GatewayError):
                self.gateway.close_run(session.run_id, "its token was revoked")
        instances = getattr(self.manager, "_server_instances", None)
        transport = instances.get(sid) if isinstance(instances, dict) else None
        if transport is not None:
            await transport.terminate()  # the SDK forgets it; its id answers 404

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve sessions until the block ends; then close the runs still open."""
        try:
            async with self.manager.run():
                yield
        finally:
            for sid in list(self.sessions):
                await self._end(sid)
            for opened in self.opened.values():
                opened.drop()
            self.opened.clear()

    async def _end(self, session_id: str) -> None:
        opened = self.opened.pop(session_id, None)
        if opened is not None:
            opened.drop()
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
