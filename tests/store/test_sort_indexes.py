"""Migration 6: each sort of a page has an index holding its whole order (status, the sort's
time, the id that breaks ties), on SQLite and PostgreSQL, so a page is read in order and
never sorted in a temporary B-tree; on SQLite the index also holds the list document, so a
page never reads a request's row. A store made before it (rows without a list document,
with migration 5's, and with today's) lists the same after it, in the same order, and pages
neither overlap nor skip, whatever the ties (hypothesis)."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench_gate.listing import listed_document
from bench_gate.models import Status, TakeoverRequest
from bench_gate.store import GENESIS, MIGRATIONS, RequestSort, open_store
from bench_gate.store import POSTGRES_MIGRATIONS as PG_MIGRATIONS
from tests import pg
from tests.pg import execute_raw
from tests.store.test_listed_requests import listed_form, listed_handoff, make, shown
from tests.store.test_queue_paging import T0, AnyStore, store

__all__ = ["pg_cluster", "store"]

pg_cluster = pg.pg_cluster
_ids = itertools.count()
#: The page the store reads for a status, in each sort (``store.page_requests``).
_PAGE = ("SELECT coalesce(listed, data) FROM requests WHERE status = ? "
         "ORDER BY {order} LIMIT ? OFFSET ?")
_ORDERS = {RequestSort.NEWEST: "created_at DESC, id", RequestSort.EXPIRY: "expires_at, id"}
_INSERT = ("INSERT INTO requests (id, run_id, instrument, status, created_at, expires_at, "
           "idempotency_key, version, requester, data, listed) "
           "VALUES (?, ?, ?, ?, ?, ?, NULL, 0, 'bot', ?, ?)")


def expected(reqs: list[TakeoverRequest], status: Status | None, sort: RequestSort
             ) -> list[str]:
    """The ids a page shows, in order, worked out here from the requests themselves."""
    chosen = [r for r in reqs if status is None or r.status is status]
    if sort is RequestSort.NEWEST:
        chosen.sort(key=lambda r: r.id)
        chosen.sort(key=lambda r: r.created_at, reverse=True)  # stable: ids stay ascending
    else:
        chosen.sort(key=lambda r: (r.expires_at, r.id))
    return [r.id for r in chosen]


def paged(store: AnyStore, status: Status | None, sort: RequestSort, size: int
          ) -> list[Any]:
    """Every page of ``size`` one after the other, joined."""
    out: list[Any] = []
    for offset in itertools.count(0, size):
        page = store.page_requests(status, limit=size, offset=offset, sort=sort)
        out.extend(page)
        if len(page) < size:
            return out
    raise AssertionError("unreachable")  # pragma: no cover


def old_rows(count: int) -> list[TakeoverRequest]:
    """Requests with ties in both times, three statuses, approvals and plans."""
    reqs = []
    for i in range(count):
        r = make({"run": {"principal": "bot", "kind": "script"}, "plan": f"pl-{i}",
                  "history": ["h"] * 5},
                 status=[Status.PENDING, Status.PENDING, Status.DENIED, Status.EXPIRED][i % 4])
        reqs.append(r.model_copy(update={
            "id": f"tk-{(i * 7) % count:03d}-{next(_ids)}",
            "created_at": T0 + timedelta(seconds=i // 3),
            "expires_at": T0 + timedelta(minutes=10, seconds=(count - i) // 4)}))
    return reqs


def stored_as_before(req: TakeoverRequest, i: int) -> str | None:
    """The list document a row written before migration 6 holds: none (before migration
    5), migration 5's (the request with its handoff cut), or today's."""
    if i % 3 == 0:
        return None
    if i % 3 == 1:
        return req.model_copy(update={"handoff": listed_handoff(req)}).model_dump_json()
    return listed_document(req)


@pytest.fixture(params=["sqlite", "postgres"])
def old_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty store's URL at schema 5, as the gateway left it before migration 6."""
    if request.param == "sqlite":
        path = tmp_path / "old.db"
        con = sqlite3.connect(path, isolation_level=None)
        for script in MIGRATIONS[:5]:
            for statement in script.split(";"):
                if statement.strip():
                    con.execute(statement)
        con.execute("PRAGMA user_version = 5")
        con.close()
        yield f"sqlite:///{path}"
        return
    cluster: pg.PgCluster = request.getfixturevalue("pg_cluster")
    url = cluster.new_database()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, "
                     "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        for number, script in enumerate(PG_MIGRATIONS[:5], start=1):
            conn.execute(script.encode())
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (number,))
        conn.execute("INSERT INTO journal_head (id, seq, hash) VALUES (1, 0, %s)", (GENESIS,))
    yield url


def _fill_old(url: str, reqs: list[TakeoverRequest]) -> None:
    """The rows as an older gateway wrote them (its own SQL, not this store's)."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url[len("sqlite:///"):]) as con:
            con.execute("INSERT INTO runs (id, created_at, data, principal, status) "
                        "VALUES ('run-1', ?, '{}', 'bot', 'active')", (T0.isoformat(),))
            for i, r in enumerate(reqs):
                con.execute(_INSERT, (r.id, r.run_id, r.instrument, r.status.value,
                                      r.created_at.isoformat(), r.expires_at.isoformat(),
                                      r.model_dump_json(), stored_as_before(r, i)))
        con.close()
        return
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO runs (id, created_at, data, principal, status) "
                     "VALUES ('run-1', %s, '{}', 'bot', 'active')", (T0,))
        for i, r in enumerate(reqs):
            conn.execute(_INSERT.replace("?", "%s"), (
                r.id, r.run_id, r.instrument, r.status.value, r.created_at, r.expires_at,
                r.model_dump_json(), stored_as_before(r, i)))


def test_an_older_store_lists_the_same_after_the_migration(old_url: str) -> None:
    """Rows of every earlier shape list, after migration 6, in the order worked out from
    the requests, each showing what the request shows; pages of any size join up; a
    request filed or changed afterwards takes its place."""
    reqs = old_rows(23)
    _fill_old(old_url, reqs)
    store = open_store(old_url)
    try:
        assert store.schema_version() == len(MIGRATIONS) >= 6
        by_id = {r.id: r for r in reqs}
        for status, sort, size in itertools.product(
                (Status.PENDING, Status.DENIED, None), RequestSort, (1, 4, 100)):
            listed = paged(store, status, sort, size)
            assert [x.id for x in listed] == expected(reqs, status, sort), (status, sort, size)
            assert [shown(x) for x in listed] == [listed_form(by_id[x.id]) for x in listed]
        # Written by this gateway after the migration: a new request, and a decided one.
        new = make({"run": {"principal": "bot"}}).model_copy(update={
            "id": "tk-000-new", "created_at": reqs[0].created_at, "expires_at": T0})
        store.create_request(new, [])
        whole = store.get_request(reqs[0].id)
        assert whole is not None
        whole.status = Status.DENIED
        assert store.save_request(whole, whole.version, [])
        now = [new, *(whole if r.id == whole.id else r for r in reqs)]
        for status, sort in itertools.product((Status.PENDING, Status.DENIED), RequestSort):
            assert [x.id for x in paged(store, status, sort, 5)] == expected(now, status, sort)
    finally:
        store.close()
    again = open_store(old_url)  # migrating again changes nothing
    try:
        assert again.schema_version() == len(MIGRATIONS)
        assert [x.id for x in again.page_requests(Status.PENDING, limit=100)] == \
            expected(now, Status.PENDING, RequestSort.NEWEST)
    finally:
        again.close()


@pytest.mark.parametrize("sort", list(RequestSort))
def test_a_page_is_read_in_order_from_its_index(store: AnyStore, sort: RequestSort) -> None:
    """Nothing sorts a page (SQLite: no temporary B-tree, and the index holds the list
    document, so the row is not read, while the count reads a narrow index; PostgreSQL,
    told to use an index where it can: no Sort node)."""
    sql = _PAGE.format(order=_ORDERS[sort])
    url = getattr(store, "url", None)
    if url is None:
        with sqlite3.connect(store.path) as con:
            plan = " / ".join(row[3] for row in con.execute(
                "EXPLAIN QUERY PLAN " + sql, ("pending", 50, 0)))
            count = " / ".join(row[3] for row in con.execute(
                "EXPLAIN QUERY PLAN SELECT count(*) FROM requests WHERE status = ?",
                ("pending",)))
        con.close()
        assert "TEMP B-TREE" not in plan, plan
        index = {RequestSort.NEWEST: "requests_newest", RequestSort.EXPIRY: "requests_soonest"}
        assert f"USING INDEX {index[sort]} (status=?)" in plan, plan
        # The page's total counts in the narrow index, not in one holding documents.
        assert "USING COVERING INDEX requests_status (status=?)" in count, count
        return
    with psycopg.connect(url) as conn:
        conn.execute("SET enable_seqscan = off")
        plan = " / ".join(str(row[0]) for row in conn.execute(
            ("EXPLAIN " + sql).replace("?", "%s"), ("pending", 50, 0)))
    assert "Sort" not in plan and "Index Scan" in plan, plan


_times = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3),
                            st.sampled_from([Status.PENDING, Status.DENIED])),
                  min_size=1, max_size=12)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(times=_times, size=st.integers(1, 5))
def test_pages_in_either_sort_neither_overlap_nor_skip(
        store: AnyStore, times: list[tuple[int, int, Status]], size: int) -> None:
    """Any times, ties in both included: paging through either sort gives every request of
    the status once, in the sort's order."""
    execute_raw(store, "DELETE FROM requests")
    reqs = []
    for created, expires, status in times:
        r = make({}, status=status).model_copy(update={
            "id": f"tk-{next(_ids) % 7}-{next(_ids)}",
            "created_at": T0 + timedelta(seconds=created),
            "expires_at": T0 + timedelta(minutes=10, seconds=expires)})
        store.create_request(r, [])
        reqs.append(r)
    for status, sort in itertools.product((Status.PENDING, Status.DENIED), RequestSort):
        assert [x.id for x in paged(store, status, sort, size)] == \
            expected(reqs, status, sort)
