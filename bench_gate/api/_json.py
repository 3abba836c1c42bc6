"""A JSON body names each key of an object once.

JSON leaves open which of two values of one key counts: Python's reader keeps the last, a
proxy, a log or a person reading the body may take the first. A write whose body says
``"command": "MEAS:VOLT? (@1)", "command": "VOLT 5,(@1)"`` (or a token body with two roles,
a grant with two edits of one field) is refused with 400 before any route reads it; nothing
is made. Only ``/v1`` bodies of a method that may carry one are looked at, after
``BodyLimit`` has capped them; a body that is not JSON is left to the route (its 400).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..texts import redact
from ._limits import refuse, replay

__all__ = ["OneValuePerKey", "key_given_twice"]

_WITH_BODY = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class _Twice(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _Twice(key)
        seen.add(key)
    return dict(pairs)


def key_given_twice(body: bytes) -> str | None:
    """The first key an object of ``body`` gives twice, or None (also when ``body`` is not
    JSON at all: the route answers that)."""
    if body.count(b'"') < 4:  # fewer than two keys anywhere
        return None
    try:
        json.loads(body, object_pairs_hook=_pairs)
    except _Twice as exc:
        return exc.key
    except (ValueError, RecursionError):
        return None
    return None


class OneValuePerKey:
    """Pure ASGI middleware: a ``/v1`` JSON body with a key given twice in one object is a
    400 problem; any other request goes on unchanged (its body handed on whole)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _WITH_BODY \
                or not str(scope["path"]).startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        body = bytearray()
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":  # the client went away
                break
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        key = key_given_twice(bytes(body))
        if key is not None:
            shown = redact(key[:60]) or "(a key)"
            await refuse(send, 400, "Bad Request",
                         f"the key {json.dumps(shown)} is given twice in one JSON object: "
                         "which value counts would be a guess; send each key once",
                         kind="duplicate-key", close=False)
            return
        await self.app(scope, replay(messages, receive), send)
