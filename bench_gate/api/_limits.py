"""Request bodies are capped before anything reads them: before authentication, routing or
parsing, on every route of the app it wraps (the API, ``/mcp`` and the console).

A body over the cap is refused with 413 (``application/problem+json`` with a reason) and is
never read whole: a declared ``Content-Length`` is judged before a byte of the body is
read, and a body without one (chunked) is counted as it arrives and refused the moment it
passes the cap. At most the cap is ever held for one request.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["DEFAULT_MAX_BODY_BYTES", "BodyLimit", "refuse", "replay"]

#: 1 MiB, the default of ``[server] max_body_bytes``.
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
PROBLEM = b"application/problem+json"


async def refuse(send: Send, status: int, title: str, reason: str, *, kind: str | None = None,
                 close: bool = True, **extra: object) -> None:
    """A problem answered before any route: ``close`` when the client may still be sending
    (the connection is closed after the answer, so the rest of the body is never read)."""
    body = json.dumps({"type": f"https://bench-gate.dev/problems/{kind or status}",
                       "title": title, "status": status, "detail": reason, "reason": reason,
                       **extra}).encode()
    headers = [(b"content-type", PROBLEM), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class BodyLimit:
    """Pure ASGI middleware: refuse any HTTP request whose body is over ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _too_large(self, send: Send, size: str) -> None:
        await refuse(send, 413, "Content Too Large",
                       f"the request body is {size}, over this server's limit of "
                       f"{self.max_bytes} bytes ([server] max_body_bytes); nothing was read",
                       limit=self.max_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared: bytes | None = None
        chunked = False
        for name, value in scope["headers"]:
            if name == b"content-length":
                declared = value
            elif name == b"transfer-encoding":
                chunked = True
        if declared is not None and not chunked:
            if not declared.strip().isdigit():
                await refuse(send, 400, "Bad Request",
                              f"Content-Length must be a number of bytes, not {declared!r}")
                return
            if int(declared) > self.max_bytes:
                await self._too_large(send, f"{int(declared)} bytes")
                return
            # The server delivers no more than the declared length; count anyway.
            await self.app(scope, self._counted(receive), send)
            return
        if not chunked:
            await self.app(scope, receive, send)  # no body
            return
        # Chunked: count while it streams in, holding at most max_bytes, then hand it on.
        held = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, replay([message], receive), send)
                return
            held += message.get("body", b"")
            if len(held) > self.max_bytes:
                await self._too_large(
                    send, f"more than {self.max_bytes} bytes (chunked, refused as it came)")
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, replay([{"type": "http.request", "body": bytes(held),
                                        "more_body": False}], receive), send)

    def _counted(self, receive: Receive) -> Receive:
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:  # pragma: no cover - the server stops at the length
                    return {"type": "http.disconnect"}
            return message
        return counted


def replay(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` that first gives back what was already read, then reads on."""
    pending = list(messages)

    async def again() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()
    return again
