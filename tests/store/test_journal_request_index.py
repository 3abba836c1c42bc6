"""Migration 8: the index of a request's events holds only events that have a request. A
read's events (most of the journal) were each a B-tree entry written at every fold and never
looked up there. A request's events are still found through it, on SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3

import psycopg

from bench_gate.models import Event, EventType
from tests import pg
from tests.store.test_queue_paging import AnyStore, run_of, store

__all__ = ["pg_cluster", "store"]

pg_cluster = pg.pg_cluster
_LOOKUP = ("SELECT seq FROM journal WHERE request_id = ? AND type = ? "
           "ORDER BY seq LIMIT ?")


def test_a_requests_events_are_found_and_reads_are_not_indexed(store: AnyStore) -> None:
    run_of(store, "run-1", "bot")
    reads = [Event(run_id="run-1", type=t, data={"message": f"VOLT? (@{i % 3 + 1})"})
             for i in range(40) for t in (EventType.COMMAND_RECEIVED, EventType.READ_EXECUTED)]
    granted = [Event(run_id="run-1", request_id=f"tk-{i}", type=EventType.APPROVAL_GRANTED,
                     data={"kind": "setpoint"}) for i in range(3)]
    store.append([*reads[:40], granted[0], *reads[40:], *granted[1:]])
    found = store.request_events("tk-1", EventType.APPROVAL_GRANTED.value)
    assert [e.request_id for e in found] == ["tk-1"] and found[0].data == {"kind": "setpoint"}
    assert store.request_events("tk-9", EventType.APPROVAL_GRANTED.value) == []
    url = getattr(store, "url", None)
    if url is None:
        with sqlite3.connect(store.path) as con:
            plan = " / ".join(row[3] for row in con.execute(
                "EXPLAIN QUERY PLAN " + _LOOKUP, ("tk-1", "approval_granted", 10)))
            (definition,) = con.execute("SELECT sql FROM sqlite_master WHERE type = 'index' "
                                        "AND name = 'journal_request'").fetchone()
        con.close()
        assert "USING COVERING INDEX journal_request (request_id=? AND type=?)" in plan, plan
        assert definition.endswith("WHERE request_id IS NOT NULL"), definition
        return
    with psycopg.connect(url) as conn:
        conn.execute("SET enable_seqscan = off")
        plan = " / ".join(str(row[0]) for row in conn.execute(
            "EXPLAIN " + _LOOKUP.replace("?", "%s"), ("tk-1", "approval_granted", 10)))
        (definition,) = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'journal_request'").fetchone()
    assert "journal_request" in plan, plan
    assert "WHERE (request_id IS NOT NULL)" in definition, definition
