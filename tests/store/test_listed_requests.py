"""A page of requests is cheap and cannot erase a handoff (SQLite and PostgreSQL): each
listed request carries only a list's handoff keys (``LISTED_HANDOFF``), every other field
as stored; the store refuses to save or insert a listed request, so a caller that lists,
changes and saves can never cut a stored handoff; and a request stored before the list
document existed (migration 5) lists the same way."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench_gate.errors import StoreError
from bench_gate.models import Action, ApprovalKind, Snapshot, Status, TakeoverRequest
from bench_gate.store import LISTED_HANDOFF, ListedRequest, RequestSort
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
         created: datetime = T0) -> TakeoverRequest:
    n = next(_ids)
    snap = Snapshot(idn="KEYSIGHT,E36312A,0,1", values={"ch1.voltage": "0.0"}, taken_at=T0)
    return TakeoverRequest(
        id=f"tk-{n:06d}", run_id="run-1", instrument="psu", message="VOLT 5,(@1)",
        actions=[Action(index=0, source=0, text="VOLT 5,(@1)", canonical="VOLT 5.0,(@1)",
                        effect="setpoint", channel=1,
                        field="voltage", old="0.0", new="5.0",
                        approval=ApprovalKind.SETPOINT)],
        required=[ApprovalKind.SETPOINT], reason="a setpoint", rationale=rationale,
        timeout_minutes=10, created_at=created + timedelta(seconds=n),
        expires_at=created + timedelta(minutes=10), snapshot=snap, proposal_hash="0" * 64,
        handoff=handoff)


def listed_form(req: TakeoverRequest) -> dict[str, Any]:
    """What a list must show of ``req``: every field, the handoff's listed keys only."""
    whole = req.model_dump(mode="json")
    whole["handoff"] = {k: req.handoff[k] for k in LISTED_HANDOFF
                        if req.handoff.get(k) is not None}
    return whole


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(handoff=_handoff, rationale=st.none() | _text)
def test_a_listed_request_is_the_stored_one_with_a_lists_handoff(
        store: AnyStore, handoff: dict[str, Any], rationale: str | None) -> None:
    req = make(handoff, rationale=rationale)
    store.create_request(req, [])
    page = store.page_requests(run_id="run-1", limit=1, sort=RequestSort.NEWEST)
    (listed,) = page
    assert isinstance(listed, ListedRequest) and listed.id == req.id
    assert listed.model_dump(mode="json") == listed_form(req)
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
        store.save_request(listed, listed.version, [])
    listed.id = "tk-copy"
    with pytest.raises(StoreError, match="read it whole"):
        store.create_request(listed, [])
    assert store.get_request("tk-copy") is None
    stored = store.get_request(req.id)
    assert stored is not None and stored.status is Status.PENDING and stored.version == 0
    assert stored.handoff == req.handoff
    stored.status = Status.CANCELLED
    assert store.save_request(stored, stored.version, [])
    (again,) = store.page_requests(Status.CANCELLED)
    assert again.model_dump(mode="json") == listed_form(stored)


def test_a_request_stored_before_its_list_document_lists_the_same(store: AnyStore) -> None:
    """Migration 5 adds the list document without rewriting old rows: an old row (no list
    document) lists from its whole data, cut to the same keys, in the same order."""
    reqs = [make({"run": {"principal": "bot", "kind": "script"}, "plan": f"pl-{i}",
                  "history": ["h"] * 30}) for i in range(4)]
    for r in reqs:
        store.create_request(r, [])
    before = [x.model_dump(mode="json") for x in store.page_requests(Status.PENDING)]
    execute_raw(store, "UPDATE requests SET listed = NULL WHERE id IN (?, ?)",
                (reqs[0].id, reqs[2].id))  # what a row written before migration 5 holds
    after = store.page_requests(Status.PENDING, sort=RequestSort.NEWEST)
    assert [x.model_dump(mode="json") for x in after] == before
    assert before == [listed_form(r) for r in reversed(reqs)]
    assert after.total == 4
