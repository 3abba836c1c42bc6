"""The operator's queue across runs, and one request with its full handoff."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from ..doorway import follow
from ..gateway import RequestSort
from ..models import Status
from ._deps import (
    PAGE_HEADERS,
    Caller,
    GatewayDep,
    page_headers,
    wait_seconds,
)
from ._schemas import TakeoverOut, takeover_out

__all__ = ["router"]

router = APIRouter(prefix="/v1/takeover", tags=["takeover"])


SortQuery = Annotated[RequestSort, Query(description=(
    "newest: created last, first (the default); expiry: expiring soonest, first (what must "
    "be decided before it is lost)"))]


@router.get("", response_model=list[TakeoverOut], responses=PAGE_HEADERS)
def queue(who: Caller, gw: GatewayDep, request: Request, response: Response,
          status: Status | None = None, instrument: str | None = None,
          limit: Annotated[int, Query(ge=1, le=1000)] = 100,
          offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
          sort: SortQuery = RequestSort.NEWEST) -> list[TakeoverOut]:
    """Requests across runs, one page at a time; ``X-Total-Count`` says how many match. A
    requester sees the requests of its own runs (filtered before the page is cut)."""
    mine = None if who.operates else who.name
    page = gw.list_requests(status, None, instrument, limit, offset, sort, requester=mine)
    page_headers(response, request, page)
    return [takeover_out(r) for r in page]


@router.get("/{tk_id}", response_model=TakeoverOut, responses={200: {"headers": {"ETag": {
    "description": "the proposal hash, quoted: what a grant or deny names (proposalHash, or "
                   "this ETag as If-Match)", "schema": {"type": "string"}}}}})
async def one(tk_id: str, who: Caller, gw: GatewayDep, response: Response,
              wait: Annotated[float | None, Query(ge=0, description="long-poll up to this "
                                                  "many seconds (at most 60) for a "
                                                  "decision")] = None) -> TakeoverOut:
    """One request with its handoff, approvals given and missing, and expiry. Its
    ``proposalHash`` (also the ``ETag``) is what a grant or deny of it names. ``tkId`` is an
    id or a unique prefix of one (``tk-731969e3``): a prefix that fits several requests is a
    422 that lists them; the body names the full id, for the calls that follow."""
    req = gw.find_request(who, tk_id)
    seconds = wait_seconds(wait)
    if seconds:
        req = await follow(gw, req, seconds)
    response.headers["ETag"] = f'"{req.proposal_hash}"'
    return takeover_out(req, handoff=True)
