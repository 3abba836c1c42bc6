"""The journal's hash chain over HTTP: ``GET /v1/journal/verify`` (admins)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from ._deps import Admin, GatewayDep

__all__ = ["router"]

router = APIRouter(prefix="/v1/journal", tags=["admin"])


class ChainOut(BaseModel):
    """The outcome of walking the chain. A broken chain is an answer, not an error: 200 with
    ``intact: false`` and ``firstBadSeq``."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    intact: bool
    #: Events checked, archived ones included (up to the first bad one, if broken).
    events: int
    #: The head: the last event's seq and hash (what to write down elsewhere).
    head_seq: int
    head: str
    #: Where the chain breaks first, why (edited, missing, relinked, out-of-order, head,
    #: segment), and in words.
    first_bad_seq: int | None = None
    problem: str | None = None
    detail: str | None = None
    #: Events in archived segment files, and how many segments.
    archived: int
    segments: int
    #: ``intact, N events, head …`` or ``broken at seq N: …``, as the CLI prints it.
    summary: str


@router.get("/verify", response_model=ChainOut, response_model_by_alias=True)
def verify(who: Admin, gw: GatewayDep) -> ChainOut:
    """Walk the whole hash chain: the archived segments ([journal] archive_dir, else where
    they were written), then the store, up to its head. Runs in a worker thread."""
    return ChainOut.model_validate(gw.verify_journal().as_json())
