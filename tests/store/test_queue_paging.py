"""Nothing is buried in the queue: one requester's flood of 3,000 held writes, and a
legitimate request filed before it. The store sorts and counts in SQL (SQLite and
PostgreSQL); the API pages with ``X-Total-Count`` and ``Link``, the CLI prints the total and
the next page, and both find the earlier request on page 1 sorted by expiry."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bench_gate.errors import QuotaExceeded
from bench_gate.models import (
    ApprovalKind,
    Run,
    RunKind,
    RunStatus,
    Snapshot,
    Status,
    TakeoverRequest,
)
from bench_gate.store import PostgresStore, RequestSort, SqliteStore, open_store
from tests import pg

from .._flood import flood, hold
from .._http_bench import Bench, start_bench

pg_cluster = pg.pg_cluster

AnyStore = SqliteStore | PostgresStore
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
FLOOD = 3000


# ------------------------------------------------------------------ the store
@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AnyStore]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        cluster: pg.PgCluster = request.getfixturevalue("pg_cluster")
        url = cluster.new_database()
    opened = open_store(url)
    yield opened
    opened.close()


def run_of(store: AnyStore, run_id: str, principal: str) -> None:
    store.create_run(Run(id=run_id, kind=RunKind.SCRIPT, principal=principal,
                         created_at=T0), [])


def request(req_id: str, run_id: str, created: datetime, minutes: int = 30,
            status: Status = Status.PENDING) -> TakeoverRequest:
    return TakeoverRequest(
        id=req_id, run_id=run_id, instrument="psu", message="VOLT 1,(@1)", actions=[],
        required=[ApprovalKind.SETPOINT], status=status, reason="r", timeout_minutes=minutes,
        created_at=created, expires_at=created + timedelta(minutes=minutes),
        snapshot=Snapshot(idn="x", values={}), proposal_hash="0" * 64)


def test_store_sorts_counts_and_filters_in_sql(store: AnyStore) -> None:
    run_of(store, "run-flood", "flood")
    run_of(store, "run-legit", "legit")
    # The legitimate request is the oldest and expires first; 40 newer ones bury it.
    store.create_request(request("tk-legit", "run-legit", T0, minutes=10), [])
    for i in range(40):
        store.create_request(request(f"tk-f{i:02}", "run-flood",
                                     T0 + timedelta(seconds=i + 1)), [])
    store.create_request(request("tk-done", "run-legit", T0, status=Status.DENIED), [])

    newest = store.page_requests(Status.PENDING, limit=10)
    assert newest.total == 41 and len(newest) == 10
    assert [r.id for r in newest][:2] == ["tk-f39", "tk-f38"] and "tk-legit" not in newest
    by_expiry = store.page_requests(Status.PENDING, limit=10, sort=RequestSort.EXPIRY)
    assert by_expiry.total == 41 and by_expiry[0].id == "tk-legit"
    assert [r.id for r in by_expiry][1:3] == ["tk-f00", "tk-f01"]

    seen = [r.id for offset in range(0, 50, 7)
            for r in store.page_requests(Status.PENDING, limit=7, offset=offset,
                                         sort="expiry")]
    assert len(seen) == len(set(seen)) == 41  # pages never overlap or skip
    beyond = store.page_requests(Status.PENDING, limit=10, offset=500)
    assert list(beyond) == [] and beyond.total == 41
    mine = store.page_requests(Status.PENDING, requester="legit")
    assert [r.id for r in mine] == ["tk-legit"] and mine.total == 1
    assert store.page_requests(None, run_id="run-legit").total == 2
    assert store.page_requests(Status.PENDING, requester="nobody").total == 0

    count, soonest = store.pending_of("flood")
    assert count == 40 and soonest == T0 + timedelta(seconds=1, minutes=30)
    assert store.pending_of("nobody") == (0, None)
    assert store.open_runs_of("flood") == 1
    run = store.get_run("run-flood")
    assert run is not None
    run.status = RunStatus.CLOSED
    store.save_run(run, [])
    assert store.open_runs_of("flood") == 0


def test_store_pending_check_is_atomic_with_the_insert(store: AnyStore) -> None:
    """Twelve threads file at once for one requester with room for three: three win."""
    run_of(store, "run-1", "bot")
    limit = 3

    def check(name: str, count: Any) -> None:
        held, _ = count()
        if held >= limit:
            raise QuotaExceeded(f"{name} is full", quota="pending_requests", limit=limit)

    store.pending_check = check
    barrier = threading.Barrier(12)
    outcomes: list[str] = []
    lock = threading.Lock()

    def file(i: int) -> None:
        barrier.wait(timeout=10)
        try:
            store.create_request(request(f"tk-{i}", "run-1", T0), [])
            result = "filed"
        except QuotaExceeded:
            result = "refused"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=file, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(outcomes) == ["filed"] * 3 + ["refused"] * 9
    assert store.pending_of("bot")[0] == 3
    # Not pending (a plan's own write), or a stale request's replacement: never refused.
    store.create_request(request("tk-approved", "run-1", T0, status=Status.APPROVED), [])
    fresh = request("tk-fresh", "run-1", T0).model_copy(update={"supersedes": "tk-0"})
    store.create_request(fresh, [])


def test_migration_fills_the_new_columns_of_an_older_store(tmp_path: Path) -> None:
    """A store made before runs and requests named their principal: the migrations fill
    the columns in from the documents."""
    import sqlite3

    from bench_gate.store import MIGRATIONS

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript(MIGRATIONS[0])
    run = Run(id="run-old", kind=RunKind.SCRIPT, principal="bot", created_at=T0)
    db.execute("INSERT INTO runs (id, created_at, data) VALUES (?, ?, ?)",
               (run.id, T0.isoformat(), run.model_dump_json()))
    old = request("tk-old", run.id, T0)
    db.execute("INSERT INTO requests (id, run_id, instrument, status, created_at, expires_at, "
               "version, data) VALUES (?, ?, ?, ?, ?, ?, 0, ?)",
               (old.id, run.id, "psu", "pending", T0.isoformat(),
                old.expires_at.isoformat(), old.model_dump_json()))
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    store = SqliteStore(path)
    try:
        assert store.open_runs_of("bot") == 1
        assert store.pending_of("bot") == (1, old.expires_at)
        assert [r.id for r in store.page_requests(requester="bot")] == ["tk-old"]
    finally:
        store.close()


# ------------------------------------------------------------------ the doors
@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("paging"),
                           limits={"pending_requests": FLOOD + 100})


@pytest.fixture(scope="module")
def flooded(bench: Bench) -> dict[str, str]:
    """bot2's legitimate write, then bot's flood of 3,000 behind it."""
    legit_run, legit = hold(bench, "bot2", "VOLT 2.5,(@1)", "the legitimate one")
    flood_run = flood(bench, "bot", FLOOD)
    return {"legit": legit, "legit_run": legit_run, "flood_run": flood_run}


def test_api_pages_and_counts_and_finds_the_earlier_request(bench: Bench,
                                                            flooded: dict[str, str]) -> None:
    with bench.http("olga") as h:
        newest = h.get("/v1/takeover", params={"status": "pending"})
        assert newest.status_code == 200
        assert newest.headers["X-Total-Count"] == str(FLOOD + 1)
        assert len(newest.json()) == 100  # the JSON is the plain list it always was
        assert flooded["legit"] not in {tk["id"] for tk in newest.json()}  # buried by age
        assert 'rel="next"' in newest.headers["Link"] and "offset=100" in newest.headers["Link"]

        soonest = h.get("/v1/takeover", params={"status": "pending", "sort": "expiry",
                                                "limit": 10})
        assert soonest.headers["X-Total-Count"] == str(FLOOD + 1)
        assert soonest.json()[0]["id"] == flooded["legit"]
        expiries = [tk["expiresAt"] for tk in soonest.json()]
        assert expiries == sorted(expiries)

        seen: list[str] = []
        offset = 0
        for _ in range(10):  # bounded: 4 pages of 1000
            page = h.get("/v1/takeover", params={"status": "pending", "sort": "expiry",
                                                 "limit": 1000, "offset": offset})
            seen += [tk["id"] for tk in page.json()]
            if 'rel="next"' not in page.headers.get("Link", ""):
                break
            offset += 1000
        assert len(seen) == len(set(seen)) == FLOOD + 1

        run = h.get(f"/v1/runs/{flooded['flood_run']}/takeover",
                    params={"sort": "expiry", "limit": 5, "offset": 5})
        assert run.headers["X-Total-Count"] == str(FLOOD) and len(run.json()) == 5
        assert 'rel="prev"' in run.headers["Link"]
        bad = h.get("/v1/takeover", params={"sort": "loudest"})
        assert bad.status_code == 422
    with bench.http("bot2") as h:  # a requester sees its own run's list, counted
        mine = h.get(f"/v1/runs/{flooded['legit_run']}/takeover")
        assert mine.headers["X-Total-Count"] == "1"
        assert mine.json()[0]["id"] == flooded["legit"]
        metrics = h.get("/metrics").text
    assert f"bench_gate_pending_requests {FLOOD + 1}" in metrics


def cli(bench: Bench, who: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "BENCH_GATE_TOKEN"}
    env["BENCH_GATE_TOKEN"] = bench.tokens[who]
    return subprocess.run([sys.executable, "-m", "bench_gate.cli", "--url", bench.url, *args],
                          capture_output=True, text=True, env=env, timeout=60)


def test_cli_pending_pages_shows_the_total_and_finds_the_earlier_request(
        bench: Bench, flooded: dict[str, str]) -> None:
    first = cli(bench, "olga", "pending")  # soonest expiry first, by default
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert lines[1].startswith(flooded["legit"])  # the row under the header
    assert f"1-100 of {FLOOD + 1} pending, soonest expiry first" in first.stdout
    assert "next page: --offset 100" in first.stdout

    newest = cli(bench, "olga", "pending", "--sort", "newest", "--limit", "20")
    assert newest.returncode == 0 and flooded["legit"] not in newest.stdout
    assert f"1-20 of {FLOOD + 1} pending, newest first" in newest.stdout
    last = cli(bench, "olga", "pending", "--sort", "newest", "--limit", "20",
               "--offset", str(FLOOD - 10))
    assert flooded["legit"] in last.stdout
    assert f"{FLOOD - 9}-{FLOOD + 1} of {FLOOD + 1} pending" in last.stdout
    assert "next page" not in last.stdout
