"""Errors as RFC 9457 problem details (``application/problem+json``), never a bare 500.

GatewayError subclasses map to one status each (``doorway.ERRORS``, every door's one table);
FastAPI's validation errors become 400 (the body is not JSON) or 422 (it is JSON but not what
the endpoint takes).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic.alias_generators import to_camel
from starlette.exceptions import HTTPException
from starlette.routing import Match

from ..doorway import problem_of
from ..errors import (
    GatewayError,
    IdempotencyKeyReused,
    InvalidInput,
    ProposalChanged,
    QuotaExceeded,
    Refused,
    WrongInstrument,
)
from ..texts import redact
from ._schemas import takeover_out

__all__ = ["PROBLEM", "install", "not_json", "problem", "unmatched"]

PROBLEM = "application/problem+json"
logger = logging.getLogger("bench_gate.api")

_TITLES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed", 409: "Conflict", 422: "Unprocessable Content",
           415: "Unsupported Media Type", 428: "Precondition Required",
           429: "Too Many Requests",
           500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}


def problem(status: int, reason: str, *, kind: str | None = None,
            headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    reason = redact(reason) or reason  # a token sent by mistake is never echoed
    body = {"type": f"https://bench-gate.dev/problems/{kind or status}",
            "title": _TITLES.get(status, "Error"), "status": status, "detail": reason,
            "reason": reason, **extra}
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def not_json(request: Request) -> JSONResponse | None:
    """A 415 problem for a body declared as anything but JSON, else None (undeclared is
    read as JSON). ``curl -d`` without ``-H 'content-type: application/json'`` sends a
    form, whose JSON text FastAPI never reads as JSON: its 422, "body: Input should be a
    valid dictionary", names neither the cause nor the cure."""
    sent = request.headers.get("content-type", "")
    if not sent or "json" in sent.lower():
        return None
    shown = redact(sent.split(";", 1)[0].strip()[:80]) or "another type"
    return problem(415, "the request body must be JSON, sent as Content-Type: "
                        f"application/json; this one was sent as {shown}",
                   kind="unsupported-media-type")


def _gateway_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, GatewayError)
    row = problem_of(exc)
    extra: dict[str, Any] = {}
    if isinstance(exc, Refused):
        extra["scpiCode"] = exc.code
    if isinstance(exc, InvalidInput) and exc.field:
        extra["errors"] = [{"loc": ["body", to_camel(exc.field)], "msg": exc.message,
                            "type": "value_error"}]
    if isinstance(exc, WrongInstrument):  # what its profile describes, and what answered
        extra.update(scpiCode=row.scpi, expected=list(exc.expected), answered=exc.actual)
    if isinstance(exc, IdempotencyKeyReused):
        extra.update(requestId=exc.request_id, differs=exc.differences)
    if isinstance(exc, ProposalChanged):
        extra.update(_proposal_changed(request, exc))
    headers = None
    if isinstance(exc, QuotaExceeded):
        extra.update(quota=exc.quota, limit=exc.limit)
        if exc.retry_after is not None:  # a slot frees by then at the latest
            extra["retryAfter"] = math.ceil(exc.retry_after)
            headers = {"Retry-After": str(math.ceil(exc.retry_after))}
    return problem(row.http, exc.message, kind=row.kind, headers=headers, **extra)


def _proposal_changed(request: Request, exc: ProposalChanged) -> dict[str, Any]:
    """What the approver must see before deciding again: the current proposal, in full
    (``ProposalChangedOut``)."""
    extra: dict[str, Any] = {"seenProposalHash": exc.seen, "currentProposalHash": exc.current}
    try:
        req = request.app.state.gateway.get_request(exc.request_id)
    except GatewayError:
        return extra
    # The request as read now, so the hash and the proposal shown agree.
    extra["currentProposalHash"] = req.proposal_hash
    extra["current"] = takeover_out(req, handoff=True).model_dump(mode="json", by_alias=True)
    return extra


def _validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    # A location names the client's own keys (an edit's), which may be a pasted token.
    errors = [{"loc": [redact(str(p)) or "" for p in e.get("loc", ())],
               "msg": redact(str(e.get("msg", ""))) or "",
               "type": str(e.get("type", ""))} for e in exc.errors()]
    if any(e["type"] == "json_invalid" for e in errors):
        return problem(400, "the request body is not valid JSON", kind="bad-json",
                       errors=errors)
    if any(e["loc"] == ["body"] and e["type"] != "missing" for e in errors):
        media = not_json(request)
        if media is not None:
            return media
    reason = "; ".join(f"{'.'.join(e['loc'])}: {e['msg']}" for e in errors)
    return problem(422, reason or "invalid request", kind="invalid-input", errors=errors)


def _http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers) if exc.headers else None
    return problem(exc.status_code, str(exc.detail), headers=headers)


def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unexpected error on %s %s", request.method, request.url.path)
    return problem(500, f"unexpected error: {type(exc).__name__}", kind="internal")


def install(app: FastAPI) -> None:
    app.add_exception_handler(GatewayError, _gateway_error)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(HTTPException, _http)
    app.add_exception_handler(Exception, _unexpected)


#: Every method an HTTP client may ask with: the API's last route takes them all.
_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def unmatched(app: FastAPI) -> None:
    """The API's last route: a ``/v1`` path no route took is a problem, never the console's
    HTML page (mounted at ``/`` after the API, it would take it): 405 with ``Allow`` when a
    route has the path with other methods, else 404."""

    async def _unmatched(request: Request) -> JSONResponse:
        routes = app.router.routes
        api = routes[:routes.index(mine)]  # the API's own: /mcp and the console come after
        allowed = [method for method in _METHODS if method != request.method and any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL
            for route in api)]
        if allowed:
            listed = ", ".join(allowed)
            return problem(405, f"{request.url.path} takes {listed}, not {request.method}",
                           headers={"Allow": listed})
        return problem(404, f"no API route {request.url.path}: see /openapi.json")

    # "/v1" itself too (a path cut at its last "/.." ends there): an API path, not a page.
    app.add_api_route("/v1", _unmatched, methods=_METHODS, include_in_schema=False)
    app.add_api_route("/v1/{rest:path}", _unmatched, methods=_METHODS,
                      include_in_schema=False)
    mine = app.router.routes[-2]
