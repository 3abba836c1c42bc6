"""The console is never framed: every response it sends says so twice, with
``X-Frame-Options: DENY`` and a Content-Security-Policy ``frame-ancestors 'none'``.

SameSite cookies do not stop a page on another port of the same host from framing the
console (another port is the same site), so the browser must refuse to render it in any
frame. The policy restricts nothing else: the console's own script and styles load as before.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["FRAME_ANCESTORS", "FrameGuard"]

FRAME_ANCESTORS = b"frame-ancestors 'none'"


def _guarded(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    out = [(k, v) for k, v in headers if k.lower() != b"x-frame-options"]
    out.append((b"x-frame-options", b"DENY"))
    for i, (key, value) in enumerate(out):
        if key.lower() == b"content-security-policy":
            if b"frame-ancestors" not in value:
                out[i] = (key, value.rstrip(b"; ") + b"; " + FRAME_ANCESTORS)
            return out
    out.append((b"content-security-policy", FRAME_ANCESTORS))
    return out


class FrameGuard:
    """Pure ASGI middleware: add the anti-framing headers to every HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": _guarded(list(message.get("headers", [])))}
            await send(message)

        await self.app(scope, receive, guarded)
