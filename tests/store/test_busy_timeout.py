"""``SqliteStore(path, busy_timeout=...)``: how long a write waits for SQLite's lock held by
another connection before it fails (docs/multibench.md). The product keeps 5 s; the tests of
a locked store set it short so they do not wait it out."""

from __future__ import annotations

import math
import sqlite3
import time
from pathlib import Path

import pytest

from bench_gate.errors import StoreError
from bench_gate.store import SqliteStore, open_store


def test_the_default_is_five_seconds(tmp_path: Path) -> None:
    for store in (SqliteStore(tmp_path / "a.db"), open_store(tmp_path / "b.db")):
        assert isinstance(store, SqliteStore) and store.busy_timeout == 5.0
        store.close()


def test_a_write_waits_the_busy_timeout_then_fails(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", busy_timeout=0.3)
    other = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        started = time.monotonic()
        with pytest.raises(StoreError, match="locked"):
            store.kv_put("probe", "k", {"v": 1})
        waited = time.monotonic() - started
        assert 0.25 <= waited < 4, f"gave up after {waited:.2f} s, not the 0.3 s asked"
        assert store.kv_items("probe") == []  # a read does not wait for it
        other.execute("ROLLBACK")
        store.kv_put("probe", "k", {"v": 1})  # the lock let go: it writes
        assert store.kv_items("probe") == [("k", {"v": 1})]
    finally:
        other.close()
        store.close()


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, 3601, True, "5", None])
def test_a_bad_busy_timeout_is_refused(tmp_path: Path, bad: object) -> None:
    with pytest.raises(StoreError, match="busy_timeout must be seconds"):
        SqliteStore(tmp_path / "x.db", busy_timeout=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "x.db").exists()
