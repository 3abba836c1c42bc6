"""The journal proves it was not edited (issue 17 §4) and keeps a bounded store (issue 15):
one hash chain per store, verified by the real `bench-gate journal verify` after rows are
edited or deleted directly in SQLite and in PostgreSQL; exports checked without the store;
archived segments checked with the live chain as one; the chain through restarts, the
migration, several gateways on one PostgreSQL and the reads' group commit; the approval's
meaning in the words the console showed."""

from __future__ import annotations

import asyncio
import hashlib
import html
import itertools
import json
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bench_gate.config import JournalConfig, load_config
from bench_gate.journal import ReadJournal, Retention, approval_meaning
from bench_gate.models import (
    Action,
    ApprovalKind,
    Event,
    EventType,
    Run,
    RunKind,
    Snapshot,
    TakeoverRequest,
)
from bench_gate.store import (
    GENESIS,
    MIGRATIONS,
    PostgresStore,
    Problem,
    SqliteStore,
    archive,
    canonical_at,
    export_run,
    link,
    open_store,
    rows_of,
    verify_file,
    verify_store,
)
from bench_gate.store import POSTGRES_MIGRATIONS as PG_MIGRATIONS
from tests import pg

from .._cli import cli
from .._http_bench import Bench, start_bench

pg_cluster = pg.pg_cluster

AnyStore = SqliteStore | PostgresStore
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
INTACT = re.compile(r"^intact, (\d+) events, head ([0-9a-f]{64})")
BROKEN = 10  # bench-gate journal verify's exit code for a chain that is not intact


def ev(run: str = "run-1", kind: EventType = EventType.READ_EXECUTED, at: datetime | None = None,
       request: str | None = None, **data: Any) -> Event:
    return Event(run_id=run, request_id=request, type=kind, at=at or datetime.now(UTC),
                 data=data)


def independent_hash(seq: int, run: str, request: str | None, type_: str, at: datetime,
                     data: dict[str, Any], prev: str) -> str:
    """The documented encoding, computed here without the store's code."""
    body = {"seq": seq, "run": run, "request": request, "type": type_,
            "at": at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "data": data,
            "prev": prev}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where this test's store lives: a fresh SQLite file, or a fresh PostgreSQL database."""
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


def chained(store: AnyStore) -> list[tuple[Any, ...]]:
    return store.chain(0, 100_000)


def tamper(url: str, sql: str, *args: Any) -> None:
    """Change the store behind its back, as someone with the database's password would."""
    if url.startswith("postgresql://"):
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.replace("?", "%s"), args)
    else:
        con = sqlite3.connect(url, isolation_level=None)
        try:
            con.execute(sql, args)
        finally:
            con.close()


# ----------------------------------------------------------------------- the encoding
def test_the_hash_is_sha256_over_the_documented_canonical_json() -> None:
    at = datetime(2024, 5, 1, 12, 0, 0, 5, tzinfo=UTC)
    data = {"message": "VOLT 5,(@1)", "μ": [1, 2.5, None, True], "nested": {"b": 1, "a": "é"}}
    prev = "ab" * 32
    stored = json.dumps(json.loads(json.dumps(data)), sort_keys=True, separators=(",", ":"))
    got = link(7, "run-1", None, "read_executed", canonical_at(at), stored, prev)
    assert got == independent_hash(7, "run-1", None, "read_executed", at, data, prev)
    assert canonical_at(at) == "2024-05-01T12:00:00.000005Z"
    # The example docs/interlocks.md works through, pinned.
    text = ('{"at":"2024-05-01T12:00:00.000000Z","data":{"kind":"setpoint"},"prev":"'
            + GENESIS + '","request":"tk-1","run":"run-1","seq":1,"type":"approval_granted"}')
    pinned = "8c5b22953c783c71314ec9509c1d1bf1b640777fbc73b902f5af10fa7071b4b9"
    assert hashlib.sha256(text.encode()).hexdigest() == pinned
    assert link(1, "run-1", "tk-1", "approval_granted", "2024-05-01T12:00:00.000000Z",
                '{"kind":"setpoint"}', GENESIS) == pinned


# ----------------------------------------------------------------------- the store
def test_every_append_extends_one_chain_that_survives_a_restart(
        opened: Callable[[], AnyStore]) -> None:
    store = opened()
    assert store.journal_head() == (0, GENESIS)
    store.create_run(Run(id="run-1", kind=RunKind.SCRIPT, principal="bot"),
                     [ev(kind=EventType.RUN_CREATED)])
    store.append([ev(message="VOLT? (@1)", response="+0"), ev(message="MEAS? (@1)")])
    store.append([ev("run-2", message="*IDN?", when=T0)], durable=False)
    first = chained(store)
    assert [int(r[0]) for r in first] == [1, 2, 3, 4]
    assert first[0][6] == GENESIS
    for before, after in itertools.pairwise(first):
        assert after[6] == before[7]  # each event names the hash of the one before
    for r in first:
        data = json.loads(r[5])
        at = r[4] if isinstance(r[4], datetime) else datetime.fromisoformat(r[4])
        assert r[7] == independent_hash(int(r[0]), r[1], r[2], r[3], at, data, r[6])
    head = store.journal_head()
    assert head == (4, first[-1][7])
    store.close()

    again = opened()  # a restart: the head is read back from the store
    assert again.journal_head() == head
    [added] = again.append([ev(message="VOLT? (@2)")], durable=False)
    assert (added.seq, added.prev) == (5, head[1])
    report = verify_store(again)
    assert report.intact and report.events == 5 and report.head == added.hash
    assert report.summary() == f"intact, 5 events, head {added.hash}"
    journal = again.journal("run-1")
    assert journal[-1].hash == added.hash and journal[-1].prev == head[1]


def test_several_writers_on_one_store_form_one_chain(opened: Callable[[], AnyStore],
                                                     url: str) -> None:
    """Threads appending at once, durable and not; on PostgreSQL, through two stores (two
    gateways) on one database: one chain, seqs 1..N without a gap, intact."""
    stores = [opened(), opened()] if url.startswith("postgresql://") else [opened()]
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        store = stores[i % len(stores)]
        try:
            for n in range(40):
                store.append([ev(f"run-{i}", n=n), ev(f"run-{i}", n=n, second=True)],
                             durable=n % 3 == 0)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    rows = chained(stores[0])
    assert [int(r[0]) for r in rows] == list(range(1, 6 * 40 * 2 + 1))
    for run in range(6):  # each append's two events are adjacent: appends are atomic
        seqs = [int(r[0]) for r in rows if r[1] == f"run-{run}"]
        assert all(b == a + 1 for a, b in zip(seqs[::2], seqs[1::2], strict=True))
    report = verify_store(stores[-1])
    assert report.intact and report.events == 480, report.summary()


def test_reads_folded_from_the_read_log_are_in_the_chain(tmp_path: Path) -> None:
    """Reads through the read log (folded on the journal's thread, in batches) and durable
    appends from other threads, at once: one intact chain, each read's two events adjacent."""
    store = SqliteStore(tmp_path / "store.db")

    async def main() -> None:
        reads = ReadJournal(store, tmp_path / "store.db.reads", fold_seconds=0.001)
        reads.open()
        for n in range(300):
            reads.append_rows(rows_of([
                ev("run-r", EventType.COMMAND_RECEIVED, message="VOLT? (@1)", n=n),
                ev("run-r", message="VOLT? (@1)", response="+0", n=n)]))
            if n % 10 == 0:
                await asyncio.to_thread(store.append, [ev("run-w", EventType.STEP_STARTED)])
            await asyncio.sleep(0)
        await reads.close()

    try:
        asyncio.run(main())
        report = verify_store(store)
        assert report.intact and report.events == 630, report.summary()
        rows = chained(store)
        assert [int(r[0]) for r in rows] == list(range(1, 631))
        reads_ = [r for r in rows if r[1] == "run-r"]
        assert [json.loads(r[5])["n"] for r in reads_[::2]] == list(range(300))
        assert all(b[0] == a[0] + 1 for a, b in zip(reads_[::2], reads_[1::2], strict=True))
    finally:
        store.close()


def test_two_processes_on_one_sqlite_file_keep_one_chain(tmp_path: Path) -> None:
    """Each store continues the head it last saw; when another connection (another process:
    the CLI beside a gateway) moved it, its one-statement append finds the seq taken, reads
    the head back and chains again."""
    first, second = SqliteStore(tmp_path / "store.db"), SqliteStore(tmp_path / "store.db")
    try:
        for n in range(20):
            (first if n % 3 else second).append([ev(n=n), ev(n=n)], durable=False)
            if n % 5 == 0:
                second.append([ev("run-2", n=n)])
        rows = chained(first)
        assert [int(r[0]) for r in rows] == list(range(1, 45))
        report = verify_store(second)
        assert report.intact and report.events == 44, report.summary()
        assert first.journal_head() == second.journal_head() == (44, rows[-1][7])
    finally:
        first.close()
        second.close()


def _old_sqlite_store(path: Path) -> list[tuple[int, datetime, dict[str, Any]]]:
    """A store as the gateway left it before the chain (schema 3), with events in it."""
    con = sqlite3.connect(path, isolation_level=None)
    for script in MIGRATIONS[:3]:
        for statement in script.split(";"):
            if statement.strip():
                con.execute(statement)
    con.execute("PRAGMA user_version = 3")
    rows = [(1, T0, {"message": "VOLT? (@1)", "z": 1}), (2, T0 + timedelta(seconds=1), {}),
            (5, T0 + timedelta(seconds=2), {"b": [1, 2], "a": "é"})]  # a gap, as ids leave
    for seq, at, data in rows:
        con.execute("INSERT INTO journal (seq, run_id, request_id, type, at, data) "
                    "VALUES (?, 'old-run', NULL, 'read_executed', ?, ?)",
                    (seq, at.isoformat(), json.dumps(data)))
    con.close()
    return rows


def _old_postgres_store(url: str) -> list[tuple[int, datetime, dict[str, Any]]]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, "
                     "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        for number, script in enumerate(PG_MIGRATIONS[:3], start=1):
            conn.execute(script.encode())
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (number,))
        rows = [(0, T0, {"message": "VOLT? (@1)", "z": 1}), (0, T0 + timedelta(seconds=1), {}),
                (0, T0 + timedelta(seconds=2), {"b": [1, 2], "a": "é"})]
        out = []
        for i, (_, at, data) in enumerate(rows):
            if i == 2:  # a rolled-back insert leaves a gap in an identity column
                conn.execute("SELECT nextval(pg_get_serial_sequence('journal', 'seq'))")
            seq = conn.execute("INSERT INTO journal (run_id, request_id, type, at, data) "
                               "VALUES ('old-run', NULL, 'read_executed', %s, %s) "
                               "RETURNING seq", (at, json.dumps(data))).fetchone()
            assert seq is not None
            out.append((int(seq[0]), at, data))
    return out


def test_the_migration_chains_the_events_a_store_already_holds(url: str, tmp_path: Path
                                                               ) -> None:
    if url.startswith("postgresql://"):
        rows = _old_postgres_store(url)
    else:
        rows = _old_sqlite_store(Path(url))
    store = open_store(url)
    try:
        assert store.schema_version() == len(MIGRATIONS)
        prev = GENESIS
        for (seq, at, data), row in zip(rows, chained(store), strict=True):
            assert int(row[0]) == seq and row[6] == prev
            assert row[7] == independent_hash(seq, "old-run", None, "read_executed", at, data,
                                              prev)
            prev = row[7]
        assert store.journal_head() == (rows[-1][0], prev)
        [added] = store.append([ev()])
        assert (added.seq, added.prev) == (rows[-1][0] + 1, prev)
        report = verify_store(store)
        assert report.intact and report.events == 4, report.summary()
    finally:
        store.close()
    again = open_store(url)  # migrating again changes nothing
    try:
        assert verify_store(again).events == 4
    finally:
        again.close()


# ----------------------------------------------------------------------- verify, tampered
def _filled(url: str) -> list[Event]:
    store = open_store(url)
    try:
        out = []
        for i in range(6):
            out += store.append([ev(f"run-{i % 2}", EventType.COMMAND_RECEIVED, n=i),
                                 ev(f"run-{i % 2}", n=i, response="+5.000")], durable=i % 2 == 0)
        return out
    finally:
        store.close()


def test_cli_verify_names_the_first_bad_seq_after_an_edit_or_a_deletion(url: str) -> None:
    """The finding's test: one row edited, then one deleted, directly in the database."""
    events = _filled(url)
    # The real executable once per command (the entry point does not depend on the store).
    real = not url.startswith("postgresql://")
    ok = cli("journal", "verify", "--db", url, real=real)
    assert ok.returncode == 0, ok.stderr
    found = INTACT.match(ok.stdout)
    assert found and found.groups() == ("12", events[-1].hash), ok.stdout

    tamper(url, "UPDATE journal SET data = ? WHERE seq = 5", json.dumps({"n": 2, "response":
                                                                          "+0.000"}))
    edited = cli("journal", "verify", "--db", url, real=real)
    assert edited.returncode == BROKEN, edited.stdout + edited.stderr
    assert edited.stdout.startswith(
        "broken at seq 5: seq 5 (command_received, run run-0) was edited")

    tamper(url, "UPDATE journal SET data = ? WHERE seq = 5", json.dumps(events[4].data))
    assert cli("journal", "verify", "--db", url).returncode == 0  # put back: intact again

    tamper(url, "DELETE FROM journal WHERE seq = 8")
    deleted = cli("journal", "verify", "--db", url, "--json")
    assert deleted.returncode == BROKEN
    report = json.loads(deleted.stdout)
    assert report["intact"] is False and report["firstBadSeq"] == 8
    assert report["problem"] == Problem.MISSING.value and "seq 8 missing" in report["detail"]

    tamper(url, "DELETE FROM journal WHERE seq >= 8")  # the newest events: the head knows
    tail = cli("journal", "verify", "--db", url)
    assert tail.returncode == BROKEN and tail.stdout.startswith("broken at seq 8: seqs 8 to "
                                                                "12 missing")
    store = open_store(url)  # the gateway goes on journaling: the gap stays in the chain
    try:
        [later] = store.append([ev(n=13)], durable=False)
        assert later.seq == 13 and later.prev != events[6].hash
    finally:
        store.close()
    after = cli("journal", "verify", "--db", url)
    assert after.returncode == BROKEN and after.stdout.startswith("broken at seq 8: seqs 8 to "
                                                                  "12 missing")


def test_cli_verify_sees_a_rewritten_link_and_a_forged_time(url: str) -> None:
    events = _filled(url)
    # An edit that recomputes the edited row's own hash still breaks the next link.
    row = {"seq": 3, "run": events[2].run_id, "request": None, "type": "command_received",
           "at": events[2].at, "data": {"n": 99}, "prev": events[1].hash}
    forged = independent_hash(3, row["run"], None, row["type"], events[2].at, {"n": 99},
                              events[1].hash)
    tamper(url, "UPDATE journal SET data = ?, hash = ? WHERE seq = 3", json.dumps({"n": 99}),
           forged)
    r = cli("journal", "verify", "--db", url)
    assert r.returncode == BROKEN and r.stdout.startswith("broken at seq 4: seq 4's prev-hash")
    tamper(url, "UPDATE journal SET data = ?, hash = ? WHERE seq = 3",
           json.dumps(events[2].data), events[2].hash)
    later = (events[6].at + timedelta(hours=1))
    tamper(url, "UPDATE journal SET at = ? WHERE seq = 7",
           later if url.startswith("postgresql://") else later.isoformat())
    r = cli("journal", "verify", "--db", url)
    assert r.returncode == BROKEN and r.stdout.startswith("broken at seq 7:"), r.stdout


# ----------------------------------------------------------------------- export
def test_an_export_verifies_on_its_own_and_against_the_store(url: str, tmp_path: Path) -> None:
    events = _filled(url)
    out = tmp_path / "run-1.jsonl"
    r = cli("journal", "export", "--db", url, "--run", "run-1", "-o", str(out),
            real=not url.startswith("postgresql://"))  # the real executable, once
    assert r.returncode == 0, r.stderr
    header, *lines = [json.loads(x) for x in out.read_text().splitlines()]
    mine = [e for e in events if e.run_id == "run-1"]
    assert header["kind"] == "export" and header["run"] == "run-1"
    assert header["events"] == 6 and header["store_head"]["hash"] == events[-1].hash
    assert [x["seq"] for x in lines] == [e.seq for e in mine]
    assert [x["hash"] for x in lines] == [e.hash for e in mine]
    assert all(x["prev"] for x in lines) and "left out" in header["limit"]

    alone = cli("journal", "verify", "--file", str(out))  # another machine: no store
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert alone.stdout.startswith(f"intact, 6 events, head {mine[-1].hash}")
    assert "follow events of other runs" in alone.stdout
    both = cli("journal", "verify", "--file", str(out), "--db", url)
    assert both.returncode == 0 and "no other event of the run" in both.stdout

    edited = tmp_path / "edited.jsonl"
    edited.write_text(out.read_text().replace('"response":"+5.000"', '"response":"+4.000"', 1))
    r = cli("journal", "verify", "--file", str(edited))
    assert r.returncode == BROKEN and r.stdout.startswith(f"broken at seq {mine[1].seq}:")

    text = out.read_text().splitlines()
    short = tmp_path / "short.jsonl"  # a line left out, header fixed to match
    head = json.loads(text[0])
    head["events"] = 5
    short.write_text("\n".join([json.dumps(head), *text[1:3], *text[4:]]) + "\n")
    assert cli("journal", "verify", "--file", str(short)).returncode == 0  # the stated limit
    against = cli("journal", "verify", "--file", str(short), "--db", url)
    assert against.returncode == BROKEN
    assert f"lacks, the first at seq {mine[2].seq}" in against.stdout


# ----------------------------------------------------------------------- retention
def test_archive_moves_old_events_to_segments_that_verify_checks_with_the_store(
        url: str, tmp_path: Path) -> None:
    store = open_store(url)
    old = [store.append([ev(f"run-{i % 2}", at=T0 + timedelta(hours=i), n=i)])[0]
           for i in range(5)]
    fresh = store.append([ev("run-1", n=99), ev("run-2", n=100)])
    store.close()
    folder = tmp_path / "archive"
    r = cli("journal", "archive", "--db", url, "--before", "2024-05-01T15:30:00",
            "--archive-dir", str(folder))
    assert r.returncode == 0, r.stderr
    segment = folder / f"journal-{1:012d}-{4:012d}.jsonl"
    assert f"archived seqs 1 to 4 (4 events) to {segment}" in r.stdout
    header, *lines = [json.loads(x) for x in segment.read_text().splitlines()]
    assert header["kind"] == "segment" and header["last_hash"] == old[3].hash
    assert [x["hash"] for x in lines] == [e.hash for e in old[:4]]

    store = open_store(url)
    try:
        live = chained(store)
        assert [int(x[0]) for x in live] == [5, 6, 7]
        assert live[0][6] == old[3].hash  # the first live event continues the archive
        report = verify_store(store)
        assert report.intact and (report.events, report.archived, report.segments) == (7, 4, 1)
        assert report.head == fresh[-1].hash
        assert [e.seq for e in store.journal("run-1")] == [6]  # archived: out of the store
    finally:
        store.close()
    ok = cli("journal", "verify", "--db", url)
    assert ok.returncode == 0 and ok.stdout.startswith(
        f"intact, 7 events, head {fresh[-1].hash} (4 of them archived in 1 segment)")
    assert cli("journal", "verify", "--file", str(segment), "--db", url).returncode == 0
    exported = tmp_path / "run-1.jsonl"  # an export reaches into the archive too
    assert cli("journal", "export", "--db", url, "--run", "run-1", "-o",
               str(exported)).returncode == 0
    assert [json.loads(x)["seq"] for x in exported.read_text().splitlines()[1:]] == [2, 4, 6]

    original = segment.read_text()
    segment.write_text(original.replace('"n":2', '"n":3'))
    r = cli("journal", "verify", "--db", url)
    assert r.returncode == BROKEN and r.stdout.startswith("broken at seq 3: seq 3"), r.stdout
    segment.write_text("\n".join(original.splitlines()[:-1]) + "\n")  # its last line gone
    r = cli("journal", "verify", "--db", url)
    assert r.returncode == BROKEN and "broken at seq 4" in r.stdout, r.stdout
    segment.unlink()
    r = cli("journal", "verify", "--db", url)
    assert r.returncode == BROKEN and r.stdout.startswith(
        "broken at seq 1: the archived segment of seqs 1 to 4 cannot be read")
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / segment.name).write_text(original)
    r = cli("journal", "verify", "--db", url, "--archive-dir", str(moved))
    assert r.returncode == 0, r.stdout


def test_archive_refuses_a_broken_chain_and_a_missing_policy(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    store = SqliteStore(db)
    store.append([ev(at=T0 + timedelta(minutes=i), n=i) for i in range(4)])
    store.close()
    r = cli("journal", "archive", "--db", str(db), real=True)  # the real executable, once
    assert r.returncode == 1 and "--before DATE, --keep-days N" in r.stderr
    tamper(str(db), "UPDATE journal SET data = '{\"n\":7}' WHERE seq = 2")
    r = cli("journal", "archive", "--db", str(db), "--keep-days", "1")
    assert r.returncode == 1 and "broken at seq 2" in r.stderr
    assert not (tmp_path / "journal-archive").exists() or \
        not list((tmp_path / "journal-archive").iterdir())


def test_keep_days_from_bench_toml_and_the_gateways_retention(tmp_path: Path) -> None:
    toml = tmp_path / "bench.toml"
    folder = tmp_path / "segments"
    toml.write_text('[[instruments]]\nname = "psu"\nresource = "TCPIP0::127.0.0.1::1::SOCKET"\n'
                    f'profile = "e36312a"\n\n[journal]\nkeep_days = 30\narchive_dir = "{folder}"\n')
    assert load_config(toml).journal == JournalConfig(keep_days=30, archive_dir=str(folder))
    assert JournalConfig().keep_days is None  # off by default
    db = tmp_path / "store.db"
    store = SqliteStore(db)
    now = datetime.now(UTC)
    store.append([ev(at=now - timedelta(days=40)), ev(at=now - timedelta(days=31)),
                  ev(at=now - timedelta(days=29)), ev(at=now)])
    store.close()
    r = cli("journal", "archive", "--db", str(db), "--config", str(toml))
    assert r.returncode == 0 and "archived seqs 1 to 2 (2 events)" in r.stdout, r.stdout
    assert (folder / f"journal-{1:012d}-{2:012d}.jsonl").exists()

    store = SqliteStore(db)
    clock = [now + timedelta(days=30)]
    retention = Retention(store, JournalConfig(keep_days=30, archive_dir=str(folder)),
                          clock=lambda: clock[0])

    async def sweeps() -> list[list[tuple[int, int]]]:
        """The gateway's sweeper ticking: an archive starts in the background, at most
        once an hour, and the sweeper never waits for it."""
        seen = []
        for _ in range(2):
            task = retention.tick()
            if task is not None:
                seen.append([(s.first_seq, s.last_seq) for s in await task])
            else:
                seen.append([])
        clock[0] += timedelta(days=1, hours=1)
        task = retention.tick()
        assert task is not None and retention.tick() is None  # one archive at a time
        await retention.close()
        seen.append([(s.first_seq, s.last_seq) for s in task.result()])
        return seen

    try:
        assert asyncio.run(sweeps()) == [[(3, 3)], [], [(4, 4)]]
        assert retention.archived == 2 and retention.last_error is None
        report = verify_store(store)
        assert report.intact and (report.events, report.segments) == (4, 3)
        off = Retention(store, JournalConfig(), clock=lambda: clock[0] + timedelta(days=999))
        assert off.tick() is None
    finally:
        store.close()


def test_export_and_archive_as_library_calls(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.db")
    try:
        store.append([ev("a", at=T0), ev("b", at=T0), ev("a", at=T0 + timedelta(days=2))])
        done = archive(store, T0 + timedelta(days=1), tmp_path / "arch", segment_events=1)
        assert [(s.first_seq, s.events) for s in done] == [(1, 1), (2, 1)]
        assert archive(store, T0 + timedelta(days=1), tmp_path / "arch") == []
        assert export_run(store, "a", tmp_path / "a.jsonl") == 2
        report = verify_file(tmp_path / "a.jsonl", store)
        assert report.intact and report.events == 2
    finally:
        store.close()


# ----------------------------------------------------------------------- approvals' meaning
def _action(effect: str, channel: int | None, words: str,
            approval: ApprovalKind | None) -> Action:
    return Action(index=0, source=0, text="", effect=effect, channel=channel, canonical="X",
                  approval=approval, words=words)


def test_approval_meaning_is_the_words_the_approver_is_shown() -> None:
    actions = [_action("setpoint", 1, "CH1 voltage setpoint 0.000 V → 5.000 V",
                       ApprovalKind.SETPOINT),
               _action("setpoint", 1, "CH1 current limit 1.000 A → 0.500 A",
                       ApprovalKind.SETPOINT),
               _action("output", 1, "CH1 output OFF → ON", ApprovalKind.OUTPUT_ENABLE),
               _action("read", None, "", None)]
    assert approval_meaning(ApprovalKind.SETPOINT, actions) == (
        "I approve the setpoint: CH1 voltage setpoint 0.000 V → 5.000 V; CH1 current limit "
        "1.000 A → 0.500 A")
    assert approval_meaning("output_enable", actions) == (
        "I approve the output enable: the output of CH1 turns ON and the DUT is energized")
    assert approval_meaning(ApprovalKind.STATE, actions) == (
        "I approve the state change: CH1 voltage setpoint 0.000 V → 5.000 V; CH1 current "
        "limit 1.000 A → 0.500 A; CH1 output OFF → ON")
    assert approval_meaning(ApprovalKind.STATE, [], message="*RCL 1") == (
        "I approve the state change: *RCL 1")


def test_the_store_records_the_meaning_with_each_approval(opened: Callable[[], AnyStore]
                                                          ) -> None:
    store = opened()
    store.create_run(Run(id="run-1", kind=RunKind.SCRIPT, principal="bot"), [])
    req = TakeoverRequest(
        id="tk-1", run_id="run-1", instrument="psu", message="VOLT 5,(@1)",
        actions=[_action("setpoint", 1, "CH1 voltage setpoint 0.000 V → 5.000 V",
                         ApprovalKind.SETPOINT)],
        required=[ApprovalKind.SETPOINT], reason="held", timeout_minutes=10,
        expires_at=datetime.now(UTC) + timedelta(minutes=10),
        snapshot=Snapshot(idn="X", values={}), proposal_hash="0" * 64)
    store.create_request(req, [])
    granted = Event(run_id="run-1", request_id="tk-1", type=EventType.APPROVAL_GRANTED,
                    data={"kind": "setpoint", "by": "olga", "notes": ""})
    told = Event(run_id="run-1", request_id="tk-1", type=EventType.APPROVAL_GRANTED,
                 data={"kind": "setpoint", "by": "oscar", "meaning": "as the gateway said"})
    assert store.save_request(req, req.version, [granted, told])
    stored = [e for e in store.journal("run-1") if e.type is EventType.APPROVAL_GRANTED]
    assert [e.data["meaning"] for e in stored] == [
        "I approve the setpoint: CH1 voltage setpoint 0.000 V → 5.000 V", "as the gateway said"]
    assert verify_store(store).intact


# ----------------------------------------------------------------------- over HTTP
LABEL = re.compile(r'<label class="decision">(.*?)</label>', re.S)


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("chain"))


def _console(bench: Bench, who: str) -> tuple[Any, str]:
    import httpx

    c = httpx.Client(base_url=bench.url, timeout=30, follow_redirects=False)
    csrf = re.compile(r'name="csrf" value="([^"]+)"')
    found = csrf.search(c.get("/login").text)
    assert found
    r = c.post("/login", data={"csrf": found.group(1), "token": bench.tokens[who], "next": "/"})
    assert r.status_code == 303
    again = csrf.search(c.get("/").text)
    assert again
    return c, again.group(1)


def test_a_console_approval_journals_the_words_on_the_approvers_screen(bench: Bench) -> None:
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "script", "goal": "meaning"}).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                 "command": "VOLT 4.5,(@1)"})
        assert r.status_code == 202, r.text
        tk = r.json()["takeover"]["id"]
    console, csrf = _console(bench, "olga")
    try:
        page = console.get(f"/requests/{tk}").text
        [label] = LABEL.findall(page)
        shown = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", label)).split())
        shown = shown.replace(" :", ":")
        assert shown.startswith("I approve the setpoint: CH1 voltage")
        form = {"csrf": csrf, "kind": "setpoint",
                "shown_hash": re.search(r'name="shown_hash" value="([^"]+)"', page).group(1),
                "shown_live": html.unescape(re.search(r'name="shown_live" value="([^"]*)"',
                                                      page).group(1))}
        assert console.post(f"/requests/{tk}/approve", data=form).status_code in (200, 303)
    finally:
        console.close()
    with bench.http("ada") as h:
        journal = h.get(f"/v1/runs/{run}/journal").json()
        events = journal["events"] if isinstance(journal, dict) else journal
        [granted] = [e for e in events if e["type"] == "approval_granted"]
        assert granted["data"]["meaning"] == shown
        assert granted["hash"] and granted["prev"]


def test_http_verify_is_for_admins_and_reports_a_tampered_row(bench: Bench) -> None:
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "script"}).json()["id"]
        assert h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                    "command": "VOLT? (@1)"}).status_code == 200
    for who in ("bot", "olga"):
        with bench.http(who) as h:
            assert h.get("/v1/journal/verify").status_code == 403
    with bench.http("ada") as h:
        ok = h.get("/v1/journal/verify")
        assert ok.status_code == 200, ok.text
        body = ok.json()
        assert body["intact"] is True and body["firstBadSeq"] is None and body["events"] > 2
        assert body["summary"] == f"intact, {body['events']} events, head {body['head']}"
        victim = body["headSeq"] - 1
        con = sqlite3.connect(bench.db, isolation_level=None)
        try:
            [(data,)] = con.execute("SELECT data FROM journal WHERE seq = ?", (victim,))
            con.execute("UPDATE journal SET data = ? WHERE seq = ?",
                        (data.replace("}", ',"x":1}', 1) if data != "{}" else '{"x":1}',
                         victim))
            bad = h.get("/v1/journal/verify").json()
            assert bad["intact"] is False and bad["firstBadSeq"] == victim
            assert bad["problem"] == "edited" and bad["summary"].startswith(
                f"broken at seq {victim}: seq {victim}")
        finally:
            con.execute("UPDATE journal SET data = ? WHERE seq = ?", (data, victim))
            con.close()
        assert h.get("/v1/journal/verify").json()["intact"] is True
