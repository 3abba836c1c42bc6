"""A query string names only the parameters its route takes.

``GET /v1/runs?status=pending`` would list every run (there is no such filter), ``?cursor=``
on a route that pages by ``offset`` would give the first page again, ``POST ...?dryRun=1``
would run for real: each parameter the route's OpenAPI operation does not list is a 422
problem naming it and the ones the route takes. The operations are the published ones
(``/openapi.json``), so a route's contract and its check cannot drift. A request without a
query string costs nothing here; a path no operation has is left to the 404.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from ..texts import redact
from ._limits import refuse

__all__ = ["KnownQuery"]

_Operations = list[tuple[re.Pattern[str], dict[str, frozenset[str]]]]


def _operations(api: FastAPI) -> _Operations:
    found: _Operations = []
    for path, ops in api.openapi().get("paths", {}).items():
        if not path.startswith("/v1/"):
            continue
        pattern = re.compile("^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(path)) + "$")
        takes: dict[str, frozenset[str]] = {}
        for method, op in ops.items():
            if isinstance(op, dict):
                params: list[dict[str, Any]] = op.get("parameters") or []
                takes[method.upper()] = frozenset(
                    str(p["name"]) for p in params if p.get("in") == "query")
        found.append((pattern, takes))
    # A literal segment before a parameter: /v1/takeover/{id} must not take /v1/takeover.
    found.sort(key=lambda row: row[0].pattern.count("[^/]+"))
    return found


class KnownQuery:
    """Pure ASGI middleware: a ``/v1`` query parameter its operation does not take is 422."""

    def __init__(self, app: ASGIApp, api: FastAPI) -> None:
        self.app = app
        self.api = api
        self._ops: _Operations | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        query: bytes = scope.get("query_string", b"") if scope["type"] == "http" else b""
        path = str(scope.get("path", ""))
        if not query or not path.startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        if self._ops is None:
            self._ops = _operations(self.api)
        method = "GET" if scope["method"] == "HEAD" else str(scope["method"])
        for pattern, takes in self._ops:
            if pattern.match(path) and method in takes:
                known = takes[method]
                names = dict.fromkeys(k for k, _ in parse_qsl(query.decode("latin-1"),
                                                              keep_blank_values=True))
                unknown = [k for k in names if k not in known]
                if unknown:
                    shown = ", ".join(repr(redact(k[:60]) or "(withheld)") for k in unknown)
                    takes_words = ", ".join(sorted(known)) or "no query parameter"
                    await refuse(send, 422, "Unprocessable Content",
                                 f"{method} {path} takes no query parameter {shown}; it "
                                 f"takes {takes_words} (nothing was done)",
                                 kind="invalid-input", close=False)
                    return
                break
        await self.app(scope, receive, send)
