"""The store contract, run against every backend (SQLite and PostgreSQL), and PostgreSQL's
behaviour when its database goes away and comes back."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bench_gate.errors import StoreError
from bench_gate.models import (
    ApprovalKind,
    Event,
    EventType,
    Run,
    RunKind,
    RunStatus,
    Snapshot,
    Status,
    TakeoverRequest,
)
from bench_gate.store import MIGRATIONS, PostgresStore, SqliteStore, open_store
from bench_gate.store import POSTGRES_MIGRATIONS as PG_MIGRATIONS
from tests import pg

pg_cluster = pg.pg_cluster

AnyStore = SqliteStore | PostgresStore
Opener = Callable[[], AnyStore]

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens the store at this test's one location (a fresh file or a fresh database);
    every store it opened is closed at the end."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        cluster: pg.PgCluster = request.getfixturevalue("pg_cluster")
        url = cluster.new_database()
    opened: list[AnyStore] = []

    def open_() -> AnyStore:
        store = open_store(url)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def store(opener: Opener) -> AnyStore:
    return opener()


def make_run(run_id: str = "run-1", at: datetime = T0) -> Run:
    return Run(id=run_id, kind=RunKind.AGENT, principal="ada", goal="sweep", created_at=at)


def make_request(req_id: str = "tk-1", run_id: str = "run-1", *, instrument: str = "psu",
                 key: str | None = None, created: datetime = T0,
                 expires: datetime | None = None, status: Status = Status.PENDING
                 ) -> TakeoverRequest:
    snapshot = Snapshot(idn="KEYSIGHT,E36312A,0,1", values={"ch1.voltage": "0.0"}, taken_at=T0)
    return TakeoverRequest(
        id=req_id, run_id=run_id, instrument=instrument, message="VOLT 5,(@1)", actions=[],
        required=[ApprovalKind.SETPOINT], status=status, reason="a setpoint",
        idempotency_key=key, timeout_minutes=10, created_at=created,
        expires_at=expires or created + timedelta(minutes=10), snapshot=snapshot,
        proposal_hash="0" * 64)


def ev(run_id: str = "run-1", kind: EventType = EventType.COMMAND_RECEIVED,
       request_id: str | None = None, **data: Any) -> Event:
    return Event(run_id=run_id, request_id=request_id, type=kind, data=data)


def kinds(events: list[Event]) -> list[EventType]:
    return [e.type for e in events]


# -- runs
def test_runs_create_get_save_list(store: AnyStore) -> None:
    assert store.get_run("nope") is None
    for i in range(5):
        store.create_run(make_run(f"run-{i}", T0 + timedelta(seconds=i)),
                         [ev(f"run-{i}", EventType.RUN_CREATED)])
    run = store.get_run("run-3")
    assert run is not None and run.goal == "sweep" and run.created_at == T0 + timedelta(seconds=3)
    run.status = RunStatus.TAKEN_OVER
    run.takeover_by = "grace"
    store.save_run(run, [ev("run-3", EventType.RUN_TAKEN_OVER)])
    again = store.get_run("run-3")
    assert again is not None and again.status is RunStatus.TAKEN_OVER
    assert again.takeover_by == "grace"
    assert [r.id for r in store.list_runs()] == ["run-4", "run-3", "run-2", "run-1", "run-0"]
    assert [r.id for r in store.list_runs(limit=2, offset=1)] == ["run-3", "run-2"]
    assert kinds(store.journal("run-3")) == [EventType.RUN_CREATED, EventType.RUN_TAKEN_OVER]


def test_list_runs_filters_by_principal_before_paging(store: AnyStore) -> None:
    """A requester's page is full of its own runs, however many others' are newer."""
    def add(run_id: str, principal: str, second: int) -> None:
        run = Run(id=run_id, kind=RunKind.AGENT, principal=principal,
                  created_at=T0 + timedelta(seconds=second))
        store.create_run(run, [ev(run_id, EventType.RUN_CREATED)])

    add("mine-old", "bot", 0)
    for i in range(300):
        add(f"other-{i:03}", "bot2" if i % 2 else "ada", i + 1)
    add("mine-new", "bot", 400)
    assert [r.id for r in store.list_runs(limit=100, principal="bot")] == ["mine-new",
                                                                            "mine-old"]
    assert [r.id for r in store.list_runs(limit=1, offset=1, principal="bot")] == ["mine-old"]
    assert store.list_runs(principal="nobody") == []
    assert len(store.list_runs(limit=1000, principal="bot2")) == 150
    assert "mine-old" not in [r.id for r in store.list_runs(limit=100)]  # unfiltered: paged


def test_duplicate_run_is_a_store_error(store: AnyStore) -> None:
    store.create_run(make_run(), [ev(kind=EventType.RUN_CREATED)])
    with pytest.raises(StoreError):
        store.create_run(make_run(), [ev(kind=EventType.RUN_CREATED)])
    assert len(store.journal("run-1")) == 1  # the failed insert journaled nothing


# -- requests
def test_create_request_with_idempotency_key_returns_the_existing_one(store: AnyStore) -> None:
    store.create_run(make_run(), [])
    first = store.create_request(make_request("tk-1", key="k1"),
                                 [ev(kind=EventType.TAKEOVER_REQUESTED, request_id="tk-1")])
    again = store.create_request(make_request("tk-2", key="k1"),
                                 [ev(kind=EventType.TAKEOVER_REQUESTED, request_id="tk-2")])
    assert first.id == again.id == "tk-1"
    assert store.get_request("tk-2") is None
    found = store.find_request("run-1", "k1")
    assert found is not None and found.id == "tk-1"
    assert store.find_request("run-1", "other") is None
    assert [e.request_id for e in store.journal("run-1")] == ["tk-1"]
    # Without a key, or with the same key on another run, each is a new request.
    assert store.create_request(make_request("tk-3"), []).id == "tk-3"
    assert store.create_request(make_request("tk-4"), []).id == "tk-4"
    assert store.create_request(make_request("tk-5", "run-2", key="k1"), []).id == "tk-5"


def test_request_round_trips(store: AnyStore) -> None:
    req = make_request(key="k")
    store.create_request(req, [])
    got = store.get_request(req.id)
    assert got == req


def test_save_request_compare_and_swap(store: AnyStore) -> None:
    store.create_request(make_request(), [])
    req = store.get_request("tk-1")
    assert req is not None and req.version == 0
    stale = req.model_copy(deep=True)

    req.status = Status.APPROVED
    assert store.save_request(req, 0, [ev(kind=EventType.APPROVAL_GRANTED, request_id="tk-1")])
    assert req.version == 1

    stale.status = Status.DENIED
    stale.notes = "no"
    assert not store.save_request(stale, 0, [ev(kind=EventType.TAKEOVER_DENIED,
                                                request_id="tk-1")])
    assert stale.version == 0  # the loser's copy is left at the version it read
    stored = store.get_request("tk-1")
    assert stored is not None
    assert (stored.status, stored.version, stored.notes) == (Status.APPROVED, 1, None)
    assert kinds(store.journal("run-1")) == [EventType.APPROVAL_GRANTED]
    assert store.list_requests(status=Status.DENIED) == []

    assert not store.save_request(make_request("tk-missing"), 0, [ev()])
    assert len(store.journal("run-1")) == 1


def test_concurrent_compare_and_swap_has_exactly_one_winner(store: AnyStore) -> None:
    store.create_request(make_request(), [])
    threads = 8
    barrier = threading.Barrier(threads)
    results: list[bool] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def contend(i: int) -> None:
        try:
            req = store.get_request("tk-1")
            assert req is not None
            req.status = Status.APPROVED if i % 2 else Status.DENIED
            req.notes = f"thread {i}"
            barrier.wait(timeout=10)
            won = store.save_request(req, 0, [ev(kind=EventType.APPROVAL_GRANTED,
                                                 request_id="tk-1", thread=i)])
            with lock:
                results.append(won)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=contend, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=30)
    assert errors == []
    assert sorted(results) == [False] * (threads - 1) + [True]
    stored = store.get_request("tk-1")
    assert stored is not None and stored.version == 1
    journal = store.journal("run-1")
    assert len(journal) == 1
    assert stored.notes == f"thread {journal[0].data['thread']}"  # the winner's write


def test_list_requests_filters_and_pages(store: AnyStore) -> None:
    specs = [("tk-a", "run-1", "psu", Status.PENDING), ("tk-b", "run-1", "dmm", Status.PENDING),
             ("tk-c", "run-2", "psu", Status.APPROVED), ("tk-d", "run-2", "psu", Status.PENDING),
             ("tk-e", "run-1", "psu", Status.EXECUTING)]
    for i, (rid, run, inst, status) in enumerate(specs):
        store.create_request(make_request(rid, run, instrument=inst, status=status,
                                          created=T0 + timedelta(minutes=i)), [])
    # Two created at the same instant are ordered by id.
    store.create_request(make_request("tk-f", created=T0 + timedelta(minutes=4)), [])

    def ids(**kw: Any) -> list[str]:
        return [r.id for r in store.list_requests(**kw)]

    assert ids() == ["tk-e", "tk-f", "tk-d", "tk-c", "tk-b", "tk-a"]
    assert ids(status=Status.PENDING) == ["tk-f", "tk-d", "tk-b", "tk-a"]
    assert ids(run_id="run-2") == ["tk-d", "tk-c"]
    assert ids(instrument="dmm") == ["tk-b"]
    assert ids(status=Status.PENDING, run_id="run-1", instrument="psu") == ["tk-f", "tk-a"]
    assert ids(limit=2) == ["tk-e", "tk-f"]
    assert ids(limit=2, offset=2) == ["tk-d", "tk-c"]
    assert ids(limit=2, offset=6) == []
    assert sorted(r.id for r in store.unfinished()) == ["tk-c", "tk-e"]


def test_request_ids_by_prefix_take_wildcards_literally(store: AnyStore) -> None:
    """An id's prefix names it (``bench-gate show tk-7319``); ``%`` and ``_`` in a prefix are
    characters, never LIKE's wildcards."""
    store.create_run(make_run(), [])
    for rid in ("tk-ab1", "tk-ab2", "tk-b_1", "tk-bx1", "tk-c%1"):
        store.create_request(make_request(rid), [])
    assert store.request_ids("tk-ab") == ["tk-ab1", "tk-ab2"]
    assert store.request_ids("tk-ab", limit=1) == ["tk-ab1"]
    assert store.request_ids("tk-b_") == ["tk-b_1"]  # not tk-bx1
    assert store.request_ids("tk-c%") == ["tk-c%1"]
    assert store.request_ids("tk-%") == [] and store.request_ids("tk-!") == []
    assert store.request_ids("tk-zz") == []


def test_due_for_expiry_compares_times(store: AnyStore) -> None:
    store.create_request(make_request("tk-early", expires=T0 + timedelta(minutes=1)), [])
    store.create_request(make_request("tk-edge", expires=T0 + timedelta(minutes=5)), [])
    store.create_request(make_request("tk-frac",
                                      expires=T0 + timedelta(minutes=5, microseconds=500)), [])
    store.create_request(make_request("tk-late", expires=T0 + timedelta(hours=2)), [])
    store.create_request(make_request("tk-done", expires=T0, status=Status.APPROVED), [])

    def due(at: datetime) -> list[str]:
        return sorted(r.id for r in store.due_for_expiry(at.isoformat()))

    assert due(T0) == []
    assert due(T0 + timedelta(minutes=5)) == ["tk-early", "tk-edge"]  # the boundary is due
    assert due(T0 + timedelta(minutes=5, microseconds=500)) == ["tk-early", "tk-edge", "tk-frac"]
    assert due(T0 + timedelta(days=1)) == ["tk-early", "tk-edge", "tk-frac", "tk-late"]


def test_due_for_expiry_compares_instants_whatever_their_utc_offsets(store: AnyStore) -> None:
    """Times given with another UTC offset (a clock on local time, a caller's ISO text)
    are the same instants: SQLite kept them as their text, and compared the texts."""
    east, west = timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))
    store.create_request(make_request("tk-soon", expires=(T0 + timedelta(minutes=1))
                                      .astimezone(east)), [])
    store.create_request(make_request("tk-later", expires=(T0 + timedelta(hours=2))
                                      .astimezone(west)), [])

    def due(at: datetime) -> list[str]:
        return sorted(r.id for r in store.due_for_expiry(at.isoformat()))

    assert due(T0 + timedelta(minutes=2)) == ["tk-soon"]
    assert due((T0 + timedelta(minutes=2)).astimezone(west)) == ["tk-soon"]
    assert due((T0 + timedelta(minutes=2)).astimezone(east)) == ["tk-soon"]
    assert due(T0 + timedelta(hours=3)) == ["tk-later", "tk-soon"]


# -- journal
def test_journal_order_pagination_and_recent(store: AnyStore) -> None:
    written = store.append([ev(i=i) for i in range(7)])
    store.append([ev("run-2", i=99)])
    written += store.append([ev(i=i) for i in range(7, 10)])
    seqs = [e.seq for e in written]
    assert seqs == sorted(seqs) and len(set(seqs)) == 10 and seqs[0] > 0

    journal = store.journal("run-1", limit=100)
    assert [e.data["i"] for e in journal] == list(range(10))
    assert [e.seq for e in journal] == seqs
    assert journal[0].at == written[0].at and journal[0].type is EventType.COMMAND_RECEIVED
    page1 = store.journal("run-1", limit=4)
    page2 = store.journal("run-1", after=page1[-1].seq, limit=4)
    page3 = store.journal("run-1", after=page2[-1].seq, limit=4)
    assert [e.data["i"] for e in page1 + page2 + page3] == list(range(10))
    assert store.journal("run-1", after=page3[-1].seq) == []
    assert [e.data["i"] for e in store.journal("run-2")] == [99]

    assert [e.data["i"] for e in store.recent("run-1", limit=3)] == [7, 8, 9]
    assert [e.data["i"] for e in store.recent("run-1")] == list(range(10))
    assert store.recent("nobody") == []


def test_journal_keeps_event_fields(store: AnyStore) -> None:
    at = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
    [written] = store.append([Event(run_id="run-1", request_id="tk-9",
                                    type=EventType.STEP_FAILED, at=at,
                                    data={"why": "timeout", "n": 1.5, "d": T0})])
    [read] = store.journal("run-1")
    assert read.seq == written.seq and read.request_id == "tk-9"
    assert read.type is EventType.STEP_FAILED and read.at == at
    assert read.data == {"why": "timeout", "n": 1.5, "d": str(T0)}


# -- setpoints and kv
def test_setpoints(store: AnyStore) -> None:
    assert store.get_setpoint("psu", 1) is None
    store.put_setpoint("psu", 1, {"voltage": "5.0", "request": "tk-1"})
    store.put_setpoint("psu", 2, {"voltage": "3.3"})
    store.put_setpoint("psu", 1, {"voltage": "6.0"})
    assert store.get_setpoint("psu", 1) == {"voltage": "6.0"}
    assert store.get_setpoint("psu", 2) == {"voltage": "3.3"}
    assert store.get_setpoint("dmm", 1) is None


def test_kv(store: AnyStore) -> None:
    assert store.kv_get("tokens", "a") is None
    assert store.kv_list("tokens") == [] and store.kv_items("tokens") == []
    store.kv_put("tokens", "b", {"name": "bob"})
    store.kv_put("tokens", "a", {"name": "ann"})
    store.kv_put("tokens", "B", {"name": "Big"})
    store.kv_put("plans", "a", {"name": "plan"})
    store.kv_put("tokens", "a", {"name": "ann", "revoked": True})
    assert store.kv_get("tokens", "a") == {"name": "ann", "revoked": True}
    # Keys sort bytewise on both backends ("B" before "a").
    assert [k for k, _ in store.kv_items("tokens")] == ["B", "a", "b"]
    assert store.kv_list("tokens") == [{"name": "Big"}, {"name": "ann", "revoked": True},
                                       {"name": "bob"}]
    assert store.kv_items("plans") == [("a", {"name": "plan"})]


# -- schema
def test_migrations_are_idempotent_on_reopen(opener: Opener) -> None:
    first = opener()
    assert first.schema_version() == len(MIGRATIONS)
    first.create_run(make_run(), [ev(kind=EventType.RUN_CREATED)])
    first.migrate()
    first.close()
    second = opener()
    second.migrate()
    assert second.schema_version() == len(MIGRATIONS)
    assert second.get_run("run-1") is not None
    assert len(second.journal("run-1")) == 1


def test_both_dialects_have_every_migration() -> None:
    assert len(PG_MIGRATIONS) == len(MIGRATIONS) >= 1


def test_postgres_schema_version_table(pg_cluster: pg.PgCluster) -> None:
    url = pg_cluster.new_database()
    store = open_store(url)
    try:
        assert isinstance(store, PostgresStore)
        with psycopg.connect(url) as conn:
            rows = conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
            assert [r[0] for r in rows] == list(range(1, len(MIGRATIONS) + 1))
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)",
                         (len(MIGRATIONS) + 1,))
        with pytest.raises(StoreError, match="newer than this gateway"):
            open_store(url)
    finally:
        store.close()


def test_open_store_selects_backend_by_url(tmp_path: Path) -> None:
    store = open_store(tmp_path / "plain.db")
    assert isinstance(store, SqliteStore)
    store.close()


# -- PostgreSQL going away
@pytest.fixture
def own_cluster(pg_cluster: pg.PgCluster) -> Iterator[pg.PgCluster]:
    """A cluster of this test's own, free to stop (``pg_cluster`` only proves we have one)."""
    with pg.PgCluster.create() as cluster:
        yield cluster


def test_unreachable_database_is_a_store_error_quickly() -> None:
    with closed_port() as port:
        started = time.monotonic()
        with pytest.raises(StoreError, match=r"unavailable.*refused") as info:
            PostgresStore(f"postgresql://postgres:s3cret@127.0.0.1:{port}/db",
                          pool_timeout=2.0)
    assert time.monotonic() - started < 6
    assert "s3cret" not in str(info.value)
    assert isinstance(info.value.__cause__, psycopg.Error)


def test_lost_database_raises_store_error_then_recovers(own_cluster: pg.PgCluster) -> None:
    store = PostgresStore(own_cluster.new_database(), pool_timeout=1.0, pool_max=4)
    try:
        store.create_run(make_run(), [ev(kind=EventType.RUN_CREATED)])
        store.create_request(make_request(), [])
        acknowledged = store.append([ev(i=i) for i in range(5)])

        own_cluster.stop(mode="immediate")  # a crash: recovery from WAL on restart
        req = make_request()
        calls: list[Callable[[], object]] = [
            lambda: store.get_run("run-1"),
            lambda: store.append([ev(i=100)]),
            lambda: store.save_request(req, 0, [ev()]),
            lambda: store.list_requests(),
            lambda: store.journal("run-1"),
            lambda: store.kv_put("t", "k", {}),
            lambda: store.due_for_expiry(T0.isoformat()),
            store.schema_version,
        ]
        for call in calls:
            started = time.monotonic()
            with pytest.raises(StoreError, match=r"unavailable|lost the PostgreSQL store"):
                call()
            assert time.monotonic() - started < 6
        assert req.version == 0  # a failed save leaves the caller's copy as it was

        own_cluster.start()
        deadline = time.monotonic() + 20
        while True:
            try:
                journal = store.journal("run-1", limit=100)
                break
            except StoreError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert [e.seq for e in journal][1:] == [e.seq for e in acknowledged]
        assert store.save_request(req, 0, [ev(kind=EventType.APPROVAL_GRANTED)])
        assert store.append([ev(i=5)])[0].seq > acknowledged[-1].seq
    finally:
        store.close()


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A 127.0.0.1 port that is bound but never listens: connections to it are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])
