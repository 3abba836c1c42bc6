"""A page of requests is cheap, shows what the request shows, and cannot erase one
(SQLite and PostgreSQL): each listed request is a ``RequestSummary`` read from the list
document kept beside it, and every list door shows of it exactly what it shows of the
stored request (the API's list item, the console's queue and history words and badges),
whatever its text (NUL included); its handoff keeps the list's keys only. A summary is not
a request: the store refuses to save or insert one, so a caller that lists, changes and
saves can never cut a stored request. A request stored before the list document existed,
or with the older list document (migration 5), lists the same way."""

from __future__ import annotations

import gc
import itertools
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench_gate import web as views
from bench_gate.api import takeover_out
from bench_gate.errors import StoreError
from bench_gate.listing import AnyRequest, RequestSummary, listed_document, summaries
from bench_gate.models import (
    Action,
    Approval,
    ApprovalKind,
    Receipt,
    Snapshot,
    Status,
    TakeoverRequest,
)
from bench_gate.store import LISTED_HANDOFF, RequestSort
from tests.pg import execute_raw
from tests.store.test_queue_paging import T0, AnyStore, pg_cluster, run_of, store

__all__ = ["pg_cluster", "store"]  # fixtures, shared with the queue's paging tests

_ids = itertools.count()


@pytest.fixture(autouse=True)
def _run(store: AnyStore) -> None:
    run_of(store, "run-1", "bot")


# Any text a requester or a profile may put in a handoff, NUL and escapes included.
_text = st.text(max_size=12)
_json: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8)
_handoff = st.dictionaries(
    st.sampled_from([*LISTED_HANDOFF, "history", "snapshot", "proposed", "actions", "risk"])
    | _text, _json, max_size=8)


def make(handoff: dict[str, Any], *, rationale: str | None = None,
         created: datetime = T0, **fields: Any) -> TakeoverRequest:
    n = next(_ids)
    snap = Snapshot(idn="KEYSIGHT,E36312A,0,1", values={"ch1.voltage": "0.0",
                                                        "ch1.output": "1"}, taken_at=T0)
    return TakeoverRequest(
        id=f"tk-{n:06d}", run_id="run-1", instrument="psu", message="VOLT 5,(@1)",
        actions=[Action(index=0, source=0, text="VOLT 5,(@1)", canonical="VOLT 5.0,(@1)",
                        effect="setpoint", channel=1,
                        field="voltage", old="0.0", new="5.0",
                        approval=ApprovalKind.SETPOINT)],
        required=[ApprovalKind.SETPOINT], reason="a setpoint", rationale=rationale,
        timeout_minutes=10, created_at=created + timedelta(seconds=n),
        expires_at=created + timedelta(minutes=10), snapshot=snap, proposal_hash="0" * 64,
        handoff=handoff, **fields)


def listed_handoff(req: TakeoverRequest) -> dict[str, Any]:
    return {k: req.handoff[k] for k in LISTED_HANDOFF if req.handoff.get(k) is not None}


def shown(req: AnyRequest) -> dict[str, Any]:
    """What the list doors show of ``req``: the API's list item (camelCase, as sent), the
    console's words, badges and deciders, and the handoff keys the queue reads."""
    return {"api": takeover_out(req).model_dump(mode="json", by_alias=True),
            "what": views.what_changes(req), "badges": views.badges(req),
            "by": views.deciders(req), "names": views.decider_names(req),
            "handoff": req.handoff, "version": req.version}


def listed_form(req: TakeoverRequest) -> dict[str, Any]:
    """What a list must show of ``req``: all the doors show of it, the listed keys only."""
    whole = shown(req)
    whole["handoff"] = listed_handoff(req)
    return whole


_when = st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1),
                     timezones=st.just(UTC))
_approval = st.builds(Approval, kind=st.sampled_from(ApprovalKind), by=_text, at=_when,
                      notes=_text, proposal_hash=st.sampled_from(["0" * 64, "1" * 64]),
                      people=st.lists(_text, max_size=2))
_receipt = st.builds(Receipt, sent=st.lists(_text, max_size=2),
                     before=st.dictionaries(_text, _text, max_size=2),
                     after=st.dictionaries(_text, _text, max_size=2),
                     approvals=st.lists(_approval, max_size=1), started_at=_when,
                     finished_at=_when, reconciled=st.booleans(), detail=_text)
#: Every field a list shows that a request's life changes, as any text may fill it.
_fields = st.fixed_dictionaries({}, optional={
    "status": st.sampled_from(Status), "approvals": st.lists(_approval, max_size=3),
    "receipt": _receipt, "decided_at": _when, "decided_by": _text, "outcome": _text,
    "notes": _text, "step_id": _text, "supersedes": _text, "superseded_by": _text,
    "plan_id": _text, "bench": _text, "confidence": st.floats(0, 1)})


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(handoff=_handoff, rationale=st.none() | _text, fields=_fields)
def test_a_listed_request_shows_what_the_stored_one_shows(
        store: AnyStore, handoff: dict[str, Any], rationale: str | None,
        fields: dict[str, Any]) -> None:
    req = make(handoff, rationale=rationale, **fields)
    store.create_request(req, [])
    page = store.page_requests(run_id="run-1", limit=1, sort=RequestSort.NEWEST)
    (listed,) = page
    assert isinstance(listed, RequestSummary) and not isinstance(listed, TakeoverRequest)
    assert listed.id == req.id and listed.status is req.status
    assert shown(listed) == listed_form(req)
    whole = store.get_request(req.id)
    assert whole is not None and type(whole) is TakeoverRequest
    assert whole.handoff == req.handoff, "the stored handoff is whole"


def test_a_listed_request_is_never_saved_or_inserted(store: AnyStore) -> None:
    """A caller that lists, changes and saves is refused, and the stored request, handoff
    and version stay as they were; getting it whole and saving that works."""
    req = make({"run": {"principal": "bot"}, "history": [{"type": "x"}] * 40,
                "snapshot": {"ch1.voltage": "0.0"}})
    store.create_request(req, [])
    (listed,) = store.page_requests(Status.PENDING)
    listed.status = Status.CANCELLED
    with pytest.raises(StoreError, match="read it whole"):
        store.save_request(listed, listed.version, [])  # type: ignore[arg-type]
    listed.id = "tk-copy"
    with pytest.raises(StoreError, match="read it whole"):
        store.create_request(listed, [])  # type: ignore[arg-type]
    assert store.get_request("tk-copy") is None
    stored = store.get_request(req.id)
    assert stored is not None and stored.status is Status.PENDING and stored.version == 0
    assert stored.handoff == req.handoff
    stored.status = Status.CANCELLED
    assert store.save_request(stored, stored.version, [])
    (again,) = store.page_requests(Status.CANCELLED)
    assert shown(again) == listed_form(stored)


def test_a_request_stored_before_its_list_document_lists_the_same(store: AnyStore) -> None:
    """Migration 5 adds the list document without rewriting old rows, and the list document
    was first the whole request with its handoff cut: a row of either kind lists the same
    as one written now, in the same order."""
    reqs = [make({"run": {"principal": "bot", "kind": "script"}, "plan": f"pl-{i}",
                  "history": ["h"] * 30},
                 approvals=[Approval(kind=ApprovalKind.SETPOINT, by="op", at=T0,
                                     proposal_hash="0" * 64)]) for i in range(4)]
    for r in reqs:
        store.create_request(r, [])
    before = [shown(x) for x in store.page_requests(Status.PENDING)]
    first = reqs[1].model_copy(update={"handoff": listed_handoff(reqs[1])})
    # What rows written before migration 5, and after it, hold.
    execute_raw(store, "UPDATE requests SET listed = NULL WHERE id IN (?, ?)",
                (reqs[0].id, reqs[2].id))
    execute_raw(store, "UPDATE requests SET listed = ? WHERE id = ?",
                (first.model_dump_json(), reqs[1].id))
    after = store.page_requests(Status.PENDING, sort=RequestSort.NEWEST)
    assert [shown(x) for x in after] == before
    assert before == [listed_form(r) for r in reversed(reqs)]
    assert after.total == 4


def test_a_list_document_is_a_fraction_of_the_request() -> None:
    """What makes a page cheap: the list document leaves out the handoff's history, the
    snapshot's other fields and each action's parse."""
    req = make({"run": {"principal": "bot"}, "history": [{"type": "x" * 40}] * 40,
                "snapshot": {"ch1.voltage": "0.0"}})
    doc = listed_document(req)
    assert len(doc) < len(req.model_dump_json()) / 3
    assert shown(RequestSummary.from_json(doc)) == listed_form(req)


def test_a_page_is_built_without_a_collection_and_the_collector_resumes() -> None:
    """Building a page runs no cyclic collection (at 10,000 requests the collections it
    triggered were half a listing's time, and could free nothing) but the one due when it
    resumes, the same summaries as one by one, and leaves the collector
    as it found it: running, or stopped by its owner; after a refused document too, and
    when two threads build pages at once."""
    doc = listed_document(make({"run": {"principal": "bot"}}))
    runs: list[int] = []

    def counted(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            runs.append(info["generation"])

    docs = [doc] * 5000
    assert gc.isenabled()
    gc.callbacks.append(counted)
    try:
        one_by_one = [RequestSummary.from_json(d) for d in docs]
        assert len(runs) > 20  # what building a page cost before
        runs.clear()
        page = summaries(docs)
        assert gc.isenabled() and len(page) == 5000
        assert len(runs) <= 1, runs  # the one due, when the collector resumes
        with pytest.raises(StoreError, match="format 9"):
            summaries([doc, "[9]"])
        assert gc.isenabled()
        gc.disable()  # an owner's choice is kept
        try:
            summaries([doc] * 10)
            assert not gc.isenabled()
        finally:
            gc.enable()
        done = threading.Barrier(3)
        pages: list[int] = []

        def build() -> None:
            done.wait()
            pages.append(len(summaries([doc] * 3000)))
        threads = [threading.Thread(target=build) for _ in range(2)]
        for t in threads:
            t.start()
        done.wait()
        for t in threads:
            t.join()
        assert pages == [3000, 3000] and gc.isenabled()
    finally:
        gc.callbacks.remove(counted)
    assert [shown(x) for x in page[:2]] == [shown(x) for x in one_by_one[:2]]
