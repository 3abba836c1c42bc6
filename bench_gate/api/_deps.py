"""Shared dependencies: the gateway, the caller, and who may see which run."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request, Response
from starlette.exceptions import HTTPException

from ..gateway import Gateway, RequestPage
from ..models import Principal, Role, Run, TakeoverRequest
from ._auth import requires

__all__ = ["NO_BODY", "PAGE_HEADERS", "Admin", "Caller", "GatewayDep", "Operator", "Presser",
           "own_request", "own_run", "page_headers", "wait_seconds"]

MAX_WAIT = 60.0


async def _gateway(request: Request) -> Gateway:  # async: no worker thread per request
    gateway: Gateway = request.app.state.gateway
    return gateway


GatewayDep = Annotated[Gateway, Depends(_gateway)]
Caller = Annotated[Principal, Depends(requires(Role.REQUESTER))]
#: Whoever presses the emergency stop: a caller, known here even while the store is away.
Presser = Annotated[Principal, Depends(requires(Role.REQUESTER, stop=True))]
Operator = Annotated[Principal, Depends(requires(Role.OPERATOR))]
Admin = Annotated[Principal, Depends(requires(Role.ADMIN))]


async def _no_body(request: Request) -> None:
    """A route that takes no body refuses one (a reason, notes): it would be dropped without
    a word, and the client would believe it was kept."""
    if await request.body():
        raise HTTPException(422, f"{request.method} {request.url.path} takes no body; send "
                                 "it empty (nothing was done)")


#: ``dependencies=NO_BODY`` on every write route without a body model: it runs first.
NO_BODY = [Depends(_no_body)]


def own_run(gateway: Gateway, run_id: str, who: Principal) -> Run:
    """The run, if ``who`` made it or may see every run (operators, admins)."""
    return gateway.visible_run(who, run_id)


def own_request(gateway: Gateway, request_id: str, who: Principal,
                run_id: str | None = None) -> TakeoverRequest:
    return gateway.visible_request(who, request_id, run_id)


#: How a list endpoint documents its paging headers (OpenAPI ``responses``).
PAGE_HEADERS: dict[int | str, dict[str, Any]] = {200: {"headers": {
    "X-Total-Count": {"description": "how many match in all, across every page",
                      "schema": {"type": "integer"}},
    "Link": {"description": "the next and previous pages (rel=\"next\", rel=\"prev\"), "
                            "when there are any", "schema": {"type": "string"}}}}}


def page_headers(response: Response, request: Request, page: RequestPage) -> None:
    """The total in ``X-Total-Count`` and the neighbouring pages in ``Link``: the body
    stays the plain list it always was."""
    response.headers["X-Total-Count"] = str(page.total)
    links = []
    if page.offset + page.limit < page.total:
        nxt = request.url.include_query_params(offset=page.offset + page.limit)
        links.append(f'<{nxt}>; rel="next"')
    if page.offset > 0:
        prev = request.url.include_query_params(offset=max(0, page.offset - page.limit))
        links.append(f'<{prev}>; rel="prev"')
    if links:
        response.headers["Link"] = ", ".join(links)


def wait_seconds(wait: float | None) -> float:
    """``?wait=`` clamped to at most 60 s per call."""
    if wait is None:
        return 0.0
    return min(max(wait, 0.0), MAX_WAIT)
