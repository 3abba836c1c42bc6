"""A key holding a NUL character: PostgreSQL's text cannot hold one (SQLite's can), and
psycopg refuses to send one, so a lookup by one was a store error (a 503 at every door).
No stored key holds one on PostgreSQL: every lookup finds nothing, on both stores alike;
keeping one is refused on PostgreSQL (422), kept on SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bench_gate.errors import InvalidInput
from bench_gate.models import (
    ApprovalKind,
    Event,
    EventType,
    Run,
    RunKind,
    Snapshot,
    Status,
    TakeoverRequest,
)
from bench_gate.store import PostgresStore, SqliteStore, open_store
from tests import pg

pg_cluster = pg.pg_cluster

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
NUL = "tk-\x00"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path
          ) -> Iterator[SqliteStore | PostgresStore]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        cluster: pg.PgCluster = request.getfixturevalue("pg_cluster")
        url = cluster.new_database()
    opened = open_store(url)
    yield opened
    opened.close()


def _request(req_id: str, key: str | None = None) -> TakeoverRequest:
    return TakeoverRequest(
        id=req_id, run_id="run-1", instrument="psu", message="VOLT 5,(@1)", actions=[],
        required=[ApprovalKind.SETPOINT], reason="a setpoint", idempotency_key=key,
        timeout_minutes=10, created_at=T0, expires_at=T0 + timedelta(minutes=10),
        snapshot=Snapshot(idn="KEYSIGHT,E36312A,0,1", values={}, taken_at=T0),
        proposal_hash="0" * 64)


def test_a_lookup_by_a_key_holding_nul_finds_nothing(store: SqliteStore | PostgresStore
                                                     ) -> None:
    store.create_run(Run(id="run-1", kind=RunKind.AGENT, principal="ada", created_at=T0),
                     [Event(run_id="run-1", type=EventType.RUN_CREATED)])
    store.create_request(_request("tk-1", key="k"), [])
    store.kv_put("plans", "plan-1", {"id": "plan-1"})
    for bad in (NUL, "\x00", "run-1\x00"):
        assert store.get_run(bad) is None
        assert store.get_request(bad) is None
        assert store.request_ids(bad) == []
        assert store.find_request("run-1", bad) is None
        assert store.find_request(bad, "k") is None
        assert store.list_requests(instrument=bad) == []
        assert store.list_requests(run_id=bad, status=Status.PENDING) == []
        assert store.page_requests(run_id=bad, requester=bad).total == 0
        assert store.list_runs(principal=bad) == []
        assert store.pending_of(bad) == (0, None)
        assert store.open_runs_of(bad) == 0
        assert store.journal(bad) == [] and store.recent(bad) == []
        assert store.request_events(bad, EventType.APPROVAL_GRANTED.value) == []
        assert store.kv_get("plans", bad) is None and store.kv_get(bad, "plan-1") is None
        assert store.get_setpoint(bad, 1) is None
        store.kv_delete("plans", bad)  # nothing to delete, and no error
    assert store.request_ids("tk-") == ["tk-1"]
    assert store.kv_get("plans", "plan-1") == {"id": "plan-1"}


def test_keeping_a_key_holding_nul_is_refused_on_postgresql_alone(
        store: SqliteStore | PostgresStore) -> None:
    store.create_run(Run(id="run-1", kind=RunKind.AGENT, principal="ada", created_at=T0), [])
    if isinstance(store, SqliteStore):
        assert store.create_request(_request("tk-1", key="a\x00b"), []).id == "tk-1"
        assert store.find_request("run-1", "a\x00b") is not None
        return
    with pytest.raises(InvalidInput, match="NUL"):
        store.create_request(_request("tk-1", key="a\x00b"), [])
    with pytest.raises(InvalidInput, match="NUL"):
        store.kv_put("plans", "a\x00b", {})
    assert store.get_request("tk-1") is None  # nothing of it was kept
