"""The store's files are readable by their owner only: the journal says who approved what
and when, and another local user of the bench machine has no business reading it. The
SQLite file (and the -wal and -shm files SQLite makes beside it with its permissions), the
read log, archived segments and exported runs."""

from __future__ import annotations

import asyncio
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench_gate.journal import ReadJournal
from bench_gate.models import Event, EventType
from bench_gate.store import SqliteStore, archive, export_run

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _others_may_read(path: Path) -> bool:
    return bool(stat.S_IMODE(path.stat().st_mode) & 0o077)


def test_a_new_store_and_what_it_writes_are_its_owners_only(tmp_path: Path) -> None:
    old = os.umask(0o022)  # a usual umask: files come out 0644 unless made otherwise
    try:
        db = tmp_path / "store" / "gateway.db"
        store = SqliteStore(db)
        journal = ReadJournal(store, tmp_path / "store" / "reads.log")
        try:
            journal.open()
            store.append([Event(run_id="a", type=EventType.COMMAND_RECEIVED, at=T0,
                                data={"message": "VOLT 1"}),
                          Event(run_id="a", type=EventType.COMMAND_RECEIVED,
                                at=T0 + timedelta(days=2), data={"message": "VOLT 2"})])
            files = [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"),
                     tmp_path / "store" / "reads.log"]
            assert all(f.exists() for f in files), files
            assert [f.name for f in files if _others_may_read(f)] == []
            done = archive(store, T0 + timedelta(days=1), tmp_path / "arch")
            assert done and not any(_others_may_read(Path(s.path)) for s in done)
            assert export_run(store, "a", tmp_path / "a.jsonl") == 2
            assert not _others_may_read(tmp_path / "a.jsonl")
        finally:
            asyncio.run(journal.close())
            store.close()
    finally:
        os.umask(old)


def test_a_store_made_before_keeps_its_mode(tmp_path: Path) -> None:
    """An existing file is the owner's choice (a group that shares the bench): kept."""
    db = tmp_path / "gateway.db"
    SqliteStore(db).close()
    db.chmod(0o640)
    SqliteStore(db).close()
    assert stat.S_IMODE(db.stat().st_mode) == 0o640
