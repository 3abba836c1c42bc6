"""The read log (bench_gate/store/_readlog.py): what a crash leaves in it is folded once, in
its order, at the head of one intact chain; a torn last record (its answer never left) is
dropped; damage no crash makes is refused; two gateways never share a log; every event
journaled after a read is ordered after it, on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench_gate.errors import StoreError
from bench_gate.models import Event, EventType
from bench_gate.store import (
    READ_LOG_TABLE,
    PostgresStore,
    ReadLog,
    SqliteStore,
    open_store,
    verify_store,
)
from tests import pg

pg_cluster = pg.pg_cluster
AnyStore = SqliteStore | PostgresStore


def read(run: str, n: int) -> list[Event]:
    return [Event(run_id=run, type=EventType.COMMAND_RECEIVED, data={"message": f"Q{n}?"}),
            Event(run_id=run, type=EventType.READ_EXECUTED,
                  data={"message": f"Q{n}?", "response": str(n)})]


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    cluster: pg.PgCluster = request.getfixturevalue("pg_cluster")
    return cluster.new_database()


@pytest.fixture
def opened(url: str) -> Iterator[Callable[[], AnyStore]]:
    stores: list[AnyStore] = []

    def open_() -> AnyStore:
        stores.append(open_store(url))
        return stores[-1]
    yield open_
    for store in stores:
        store.close()


def responses(store: AnyStore, run: str) -> list[str]:
    return [str(e.data["response"]) for e in store.journal(run, limit=10_000)
            if e.type is EventType.READ_EXECUTED]


def test_a_crash_leaves_its_reads_in_the_log_and_the_next_start_folds_them_once(
        opened: Callable[[], AnyStore], tmp_path: Path) -> None:
    path = tmp_path / "reads.log"
    store = opened()
    store.append([Event(run_id="run-a", type=EventType.RUN_CREATED)])
    log = ReadLog(path)
    store.attach_reads(log)
    for n in range(3):
        store.log_read(read("run-a", n))
    log.close()  # the process dies: nothing folded, the records are in the file
    assert responses(opened(), "run-a") == []  # another process reading the store

    again = opened()
    log = ReadLog(path)
    assert again.attach_reads(log) == 3
    assert responses(again, "run-a") == ["0", "1", "2"]
    types = [e.type for e in again.journal("run-a", limit=100)]
    assert types == [EventType.RUN_CREATED] + [EventType.COMMAND_RECEIVED,
                                               EventType.READ_EXECUTED] * 3
    assert path.stat().st_size == len(path.read_bytes().split(b"\n")[0]) + 1, \
        "cut to its header once folded"
    log.close()
    third = opened()  # a second start folds nothing twice
    log = ReadLog(path)
    assert third.attach_reads(log) == 0
    assert responses(third, "run-a") == ["0", "1", "2"]
    report = verify_store(third)
    assert report.intact and report.events == 7, report.summary()
    log.close()


def test_a_crash_between_the_folds_commit_and_the_cut_folds_nothing_twice(
        opened: Callable[[], AnyStore], tmp_path: Path) -> None:
    path = tmp_path / "reads.log"
    store = opened()
    log = ReadLog(path)
    store.attach_reads(log)
    for n in range(4):
        store.log_read(read("run-a", n))
    batch = log.take(2)
    store.fold_rows([row for r in batch for row in r[1]], log.id, batch[-1][0])  # committed ...
    log.close()  # ... and the process dies before the file is cut
    assert store.kv_get(READ_LOG_TABLE, log.id) == {"lsn": 2}

    again = opened()
    log = ReadLog(path)
    assert log.pending == 4
    assert again.attach_reads(log) == 2
    assert responses(again, "run-a") == ["0", "1", "2", "3"]
    again.log_read(read("run-a", 4))  # numbering goes on after the mark
    again.detach_reads()
    assert responses(again, "run-a") == ["0", "1", "2", "3", "4"]
    assert verify_store(again).intact
    log.close()


def test_a_torn_last_record_is_dropped_its_answer_never_left(tmp_path: Path) -> None:
    """A record is whole in the file before its answer is sent; a crash in the middle of
    writing one leaves a last line that is short or does not check: that read was never
    answered, so dropping it loses nothing a client saw."""
    path = tmp_path / "reads.log"
    store = SqliteStore(tmp_path / "store.db")
    log = ReadLog(path)
    store.attach_reads(log)
    for n in range(2):
        store.log_read(read("run-a", n))
    log.close()
    whole = path.read_bytes()
    for torn in (whole.split(b"\n")[-2][:30],  # cut short, no newline
                 b"00000000 " + whole.split(b"\n")[-2][9:] + b"\n"):  # whole, bad CRC
        path.write_bytes(whole + torn)
        log = ReadLog(path)
        assert log.torn == len(torn) and log.pending == 2
        assert path.read_bytes() == whole, "the torn tail is cut off before new records"
        log.close()
    log = ReadLog(path)
    store.attach_reads(log)
    store.log_read(read("run-a", 2))  # appended after the cut, numbered on
    store.detach_reads()
    assert responses(store, "run-a") == ["0", "1", "2"]
    assert verify_store(store).intact
    log.close()
    store.close()


def test_damage_before_good_records_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "reads.log"
    log = ReadLog(path)
    for n in range(3):
        log.write(read("run-a", n))
    log.close()
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b"Q1?", b"Q9?")  # the second record edited
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(StoreError, match="damaged at byte"):
        ReadLog(path)
    path.write_bytes(b"not a read log\n")
    with pytest.raises(StoreError, match="not a bench-gate read log"):
        ReadLog(path)


def test_two_gateways_never_share_a_log(tmp_path: Path) -> None:
    log = ReadLog(tmp_path / "reads.log")
    with pytest.raises(StoreError, match="in use by another gateway"):
        ReadLog(tmp_path / "reads.log")
    log.close()
    ReadLog(tmp_path / "reads.log").close()  # free once closed (or its process is gone)


def test_a_long_log_is_rewritten_with_only_what_waits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ReadLog, "compact_bytes", 1000)
    path = tmp_path / "reads.log"
    store = SqliteStore(tmp_path / "store.db")
    log = ReadLog(path)
    store.attach_reads(log)
    for n in range(20):
        store.log_read(read("run-a", n))
    lines = path.read_bytes().split(b"\n")
    batch = log.take(15)
    store.fold_rows([row for r in batch for row in r[1]], log.id, batch[-1][0])
    log.folded(batch[-1][0])  # five still wait: the file keeps only them
    assert path.read_bytes().split(b"\n") == [lines[0], *lines[16:]] and log.pending == 5
    log.close()
    again = ReadLog(path)
    assert [r[0] for r in again.take(100)] == [16, 17, 18, 19, 20]
    assert store.attach_reads(again) == 5
    assert responses(store, "run-a") == [str(n) for n in range(20)]
    assert verify_store(store).intact
    again.close()
    store.close()


def test_a_long_backlog_is_not_rewritten_at_every_fold(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads logged while the store could not take them (locked by another process) fold
    in batches once it can: the file is rewritten when what was folded from it is large,
    not at every batch (each rewrite copies the whole backlog while reads wait)."""
    monkeypatch.setattr(ReadLog, "compact_bytes", 2000)
    path = tmp_path / "reads.log"
    store = SqliteStore(tmp_path / "store.db")
    log = ReadLog(path)
    store.attach_reads(log)
    for n in range(200):
        store.log_read(read("run-a", n))
    size = path.stat().st_size
    assert size > 10 * ReadLog.compact_bytes  # the backlog alone is over the size
    rewrites, inode, dead = 0, path.stat().st_ino, 0
    while batch := log.take(4):
        store.fold_rows([row for r in batch for row in r[1]], log.id, batch[-1][0])
        log.folded(batch[-1][0])
        dead += sum(len(r[2]) for r in batch)
        if path.exists() and path.stat().st_ino != inode:
            rewrites, inode = rewrites + 1, path.stat().st_ino
    assert log.pending == 0
    assert 1 <= rewrites <= dead // ReadLog.compact_bytes, (rewrites, dead)
    assert responses(store, "run-a") == [str(n) for n in range(200)]
    assert verify_store(store).intact
    log.close()
    store.close()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.sampled_from(["read", "write", "fold", "look"]), min_size=1,
                    max_size=30))
def test_the_journal_keeps_the_order_things_happened_in(tmp_path_factory: pytest.TempPathFactory,
                                                        ops: list[str]) -> None:
    """Whatever mix of reads (logged), writes (appended), folds and journal reads: the
    journal holds everything once, in the order it happened, in one intact chain."""
    folder = tmp_path_factory.mktemp("order")
    store = SqliteStore(folder / "store.db")
    log = ReadLog(folder / "reads.log")
    store.attach_reads(log)
    done: list[str] = []
    for i, op in enumerate(ops):
        if op == "read":
            store.log_read([Event(run_id="run", type=EventType.READ_EXECUTED, data={"i": i})])
            done.append(f"read {i}")
        elif op == "write":
            store.append([Event(run_id="run", type=EventType.STEP_STARTED, data={"i": i})])
            done.append(f"write {i}")
        elif op == "fold":
            store.fold_reads()
        else:
            assert len(store.journal("run", limit=1000)) == len(done), "a reader sees all"
    store.detach_reads()
    journal = store.journal("run", limit=1000)
    kinds = {EventType.READ_EXECUTED: "read", EventType.STEP_STARTED: "write"}
    assert [f"{kinds[e.type]} {e.data['i']}" for e in journal] == done
    assert verify_store(store).intact
    log.close()
    store.close()


def test_two_gateways_on_one_postgres_keep_their_logs_apart_and_one_chain(
        pg_cluster: pg.PgCluster, tmp_path: Path) -> None:
    url = pg_cluster.new_database()
    a, b = open_store(url), open_store(url)
    logs = [ReadLog(tmp_path / "a.log"), ReadLog(tmp_path / "b.log")]
    try:
        a.attach_reads(logs[0])
        b.attach_reads(logs[1])
        for n in range(10):
            (a if n % 2 else b).log_read(read("run-a" if n % 2 else "run-b", n))
            if n % 3 == 0:
                a.append([Event(run_id="run-a", type=EventType.STEP_STARTED)])
        a.detach_reads()
        b.detach_reads()
        assert responses(a, "run-a") == ["1", "3", "5", "7", "9"]
        assert responses(a, "run-b") == ["0", "2", "4", "6", "8"]
        report = verify_store(a)
        assert report.intact and report.events == 24, report.summary()
        marks = [json.dumps(a.kv_get(READ_LOG_TABLE, log.id)) for log in logs]
        assert marks == ['{"lsn": 5}', '{"lsn": 5}']
    finally:
        for log in logs:
            log.close()
        a.close()
        b.close()


def test_an_archive_folds_first_and_loses_no_read_still_in_the_log(tmp_path: Path) -> None:
    """Retention archives what the store holds: it folds the log first, so a read still in
    the log is archived with the rest (or stays for the next archive), never lost."""
    from datetime import UTC, datetime, timedelta

    from bench_gate.store import archive

    store = SqliteStore(tmp_path / "store.db")
    log = ReadLog(tmp_path / "reads.log")
    store.attach_reads(log)
    store.append([Event(run_id="run-a", type=EventType.RUN_CREATED)])
    for n in range(3):
        store.log_read(read("run-a", n))
    assert log.pending == 3
    segments = archive(store, datetime.now(UTC) + timedelta(days=1), tmp_path / "archive")
    assert log.pending == 0 and sum(s.events for s in segments) == 7
    store.log_read(read("run-a", 3))  # after the archive: folded into the store as usual
    report = verify_store(store, tmp_path / "archive")
    assert report.intact and report.events == 9 and report.archived == 7, report.summary()
    assert responses(store, "run-a") == ["3"]
    log.close()
    store.close()
