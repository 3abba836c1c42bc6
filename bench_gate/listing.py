"""A request as a list shows it (``RequestSummary``): flat, light, and never a request.

Every list door (the API's list items, the console's queue and history, the CLI's
``pending``) shows a page of requests, and none shows a handoff's history, the snapshot's
identity or an action's parse. So the store keeps, beside each request, a *list document*
(:func:`listed_document`): a JSON array of what a list shows, in ``RequestSummary``'s
order, which a page reads with pydantic-core's JSON parser (about twice as quick as
``json.loads``, and an array half the work of the same object with its keys) into plain
slotted objects, without pydantic's validation of the nested models: at 10,000 requests
that validation was most of a listing's time.

The document was written by the store from a validated :class:`TakeoverRequest`, so it is
trusted as it is. Two older shapes read the same way, through the same mapping the writer
uses (:func:`_row`): the list document of migration 5 (the request with its handoff cut)
and a whole request (a row stored before either).

A summary is not a ``TakeoverRequest``: the store refuses to save or insert one, so a
caller that lists, changes and saves can never write a summary over a request.
"""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic_core import from_json

from .errors import StoreError
from .models import ApprovalKind, Status, TakeoverRequest

__all__ = ["FORMAT", "LISTED_HANDOFF", "AnyRequest", "ListedAction", "ListedApproval",
           "ListedSnapshot", "RequestSummary", "listed_document", "summaries", "summary_of"]

#: The handoff keys a list keeps: who asked (``run``), a standing ``plan``, a resubmission
#: after a change (``stale_diff``), an edit by an approver (``edited``), what the console's
#: queue shows. The rest (the run's
#: history, snapshots, proposed state) is most of a request's size and is read with the
#: request itself (``get_request``).
LISTED_HANDOFF = ("run", "plan", "stale_diff", "edited")

#: What a list document is made from, by the request's own JSON keys (pydantic's
#: ``include``): the fields a list door shows, and of each action and the snapshot only
#: what the console's queue needs (its words, channel, effect, approval; the outputs'
#: live values, ``OUTPUTS``).
_INCLUDE: dict[str, Any] = {
    **{key: True for key in (
        "id", "run_id", "instrument", "message", "required", "status", "reason", "step_id",
        "rationale", "confidence", "created_at", "expires_at", "decided_at",
        "proposal_hash", "receipt", "notes", "decided_by", "outcome", "supersedes",
        "superseded_by", "plan_id", "bench", "on_resend", "version")},
    "actions": {"__all__": {"channel", "effect", "approval", "words", "canonical"}},
    "approvals": {"__all__": {"kind", "by", "at", "notes", "proposal_hash"}},
    "snapshot": {"values"},
    "handoff": set(LISTED_HANDOFF),
}
#: The list document's first element: the shape of the array that follows.
FORMAT = 1

@dataclass(slots=True)
class ListedAction:
    """What a list shows of one action: its words (or canonical text), channel, effect."""

    channel: int | None
    effect: str
    approval: ApprovalKind | None
    words: str
    canonical: str


@dataclass(slots=True)
class ListedApproval:
    kind: ApprovalKind
    by: str
    at: datetime
    notes: str
    proposal_hash: str


#: The snapshot fields a list keeps: whether each output was on (the queue's "OUTPUT LIVE").
OUTPUTS = ".output"


# Enum members by value: a dict look-up is a tenth of calling the Enum, per field per row.
_STATUS = {s.value: s for s in Status}
_KIND = {k.value: k for k in ApprovalKind}

#: Each ``required`` a page has met, as one shared tuple. Why share: every container a
#: page keeps is one more object for CPython's cyclic collector (see ``summaries``), so a
#: summary keeps few: what repeats (``required``, no approvals) is shared and immutable.
_REQUIRED: dict[tuple[str, ...], tuple[ApprovalKind, ...]] = {}
#: Bounds ``_REQUIRED`` (a handful of combinations of a few kinds exist).
_REQUIRED_MAX = 64


def _required(kinds: list[str]) -> tuple[ApprovalKind, ...]:
    key = tuple(kinds)
    found = _REQUIRED.get(key)
    if found is None:
        found = tuple(_KIND[k] for k in key)
        if len(_REQUIRED) < _REQUIRED_MAX:
            _REQUIRED[key] = found
    return found


def _outputs(values: dict[str, str]) -> dict[str, str]:
    """The snapshot's values a list shows: each output's state (``ch1.output``)."""
    return {k: v for k, v in values.items() if k.endswith(OUTPUTS)}


@dataclass(slots=True)
class ListedSnapshot:
    """Of the live values the request was judged against, the outputs' (``OUTPUTS``)."""

    values: dict[str, str]


@dataclass(slots=True)
class RequestSummary:
    """One listed request: the fields a list shows, in the names ``TakeoverRequest`` uses.
    ``receipt`` is its JSON form, as stored; ``handoff`` holds ``LISTED_HANDOFF`` only."""

    id: str
    run_id: str
    instrument: str
    message: str
    status: Status
    required: tuple[ApprovalKind, ...]
    approvals: tuple[ListedApproval, ...]
    actions: tuple[ListedAction, ...]
    snapshot: ListedSnapshot
    reason: str
    step_id: str | None
    rationale: str | None
    confidence: float | None
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None
    proposal_hash: str
    receipt: dict[str, Any] | None
    notes: str | None
    decided_by: str | None
    outcome: str | None
    supersedes: str | None
    superseded_by: str | None
    plan_id: str | None
    bench: str
    on_resend: bool
    handoff: dict[str, Any]
    version: int

    @classmethod
    def from_json(cls, text: str | bytes) -> RequestSummary:
        """A summary from a list document, or from any request's stored JSON."""
        doc = from_json(text)
        row = doc if isinstance(doc, list) else _row(doc)
        if row[0] != FORMAT:
            raise StoreError(f"a list document of format {row[0]!r} (a newer gateway's?): "
                             f"this gateway reads format {FORMAT}")
        (_, id_, run_id, instrument, message, status, required, approvals, actions, outputs,
         reason, step_id, rationale, confidence, created_at, expires_at, decided_at,
         proposal_hash, receipt, notes, decided_by, outcome, supersedes, superseded_by,
         plan_id, bench, on_resend, handoff, version) = row
        return cls(
            id_, run_id, instrument, message, _STATUS[status], _required(required),
            tuple([ListedApproval(_KIND[kind], by, datetime.fromisoformat(at), notes_, hash_)
                   for kind, by, at, notes_, hash_ in approvals]) if approvals else (),
            tuple([ListedAction(channel, effect, _KIND[kind] if kind else None, words,
                                canonical)
                   for channel, effect, kind, words, canonical in actions]),
            ListedSnapshot(outputs), reason, step_id, rationale, confidence,
            datetime.fromisoformat(created_at), datetime.fromisoformat(expires_at),
            datetime.fromisoformat(decided_at) if decided_at else None, proposal_hash,
            receipt, notes, decided_by, outcome, supersedes, superseded_by, plan_id, bench,
            on_resend, handoff, version)

    # The same questions ``TakeoverRequest`` answers, for the doors that show them.
    def valid_approvals(self) -> list[ListedApproval]:
        return [a for a in self.approvals if a.proposal_hash == self.proposal_hash]

    def approved_kinds(self) -> set[ApprovalKind]:
        return {a.kind for a in self.valid_approvals()}

    def missing(self) -> list[ApprovalKind]:
        have = self.approved_kinds()
        return [k for k in self.required if k not in have]


#: What a page that shows one request or a list of them takes: a whole one, or a summary.
AnyRequest = TakeoverRequest | RequestSummary


class _Pauses:
    """The cyclic collector paused while any thread builds a page, and resumed (if it ran
    before the first pause) when the last one ends."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open = 0
        self.resume = False

    @contextmanager
    def paused(self) -> Iterator[None]:
        with self.lock:
            if self.open == 0:
                self.resume = gc.isenabled()
                gc.disable()
            self.open += 1
        try:
            yield
        finally:
            with self.lock:
                self.open -= 1
                if self.open == 0 and self.resume:
                    gc.enable()


_PAUSES = _Pauses()


def summaries(documents: Iterable[str | bytes]) -> list[RequestSummary]:
    """A page's summaries from their list documents, built with CPython's cyclic collector
    paused. A page of 10,000 keeps some 50,000 new containers; the collector runs a young
    collection every 700 net allocations and a full one, over the whole heap, each time
    the survivors grow by a quarter of it, so building the page triggered several full
    collections, which cost more than the parsing (85 of 170 ms in one profile), and could
    free nothing: everything built is reachable from the page, and parsing JSON makes no
    cycles. The collector resumes after (its counts kept, so it runs at the next
    allocation if due); a listing is short, and garbage other threads leave meanwhile
    waits for it."""
    with _PAUSES.paused():
        return [RequestSummary.from_json(doc) for doc in documents]


def _row(d: dict[str, Any]) -> list[Any]:
    """A request's JSON (whole, cut, or ``_INCLUDE``'s part) as a list document's array."""
    handoff = d.get("handoff") or {}
    return [
        FORMAT, d["id"], d["run_id"], d["instrument"], d["message"], d["status"],
        d["required"],
        [[a["kind"], a["by"], a["at"], a.get("notes", ""), a["proposal_hash"]]
         for a in d.get("approvals") or ()],
        [[a.get("channel"), a["effect"], a.get("approval"), a.get("words", ""), a["canonical"]]
         for a in d["actions"]],
        _outputs(d["snapshot"]["values"]), d["reason"], d.get("step_id"), d.get("rationale"),
        d.get("confidence"), d["created_at"], d["expires_at"], d.get("decided_at"),
        d["proposal_hash"], d.get("receipt"), d.get("notes"), d.get("decided_by"),
        d.get("outcome"), d.get("supersedes"), d.get("superseded_by"), d.get("plan_id"),
        d.get("bench", ""), bool(d.get("on_resend")),
        {k: handoff[k] for k in LISTED_HANDOFF if handoff.get(k) is not None},
        int(d.get("version", 0))]


def listed_document(req: TakeoverRequest) -> str:
    """The list document the store keeps beside ``req`` (a fraction of its size)."""
    return json.dumps(_row(req.model_dump(mode="json", include=_INCLUDE)),
                      ensure_ascii=False, separators=(",", ":"))


def summary_of(req: TakeoverRequest) -> RequestSummary:
    """``req`` as a list shows it (what a page of the store gives for it)."""
    return RequestSummary.from_json(listed_document(req))
