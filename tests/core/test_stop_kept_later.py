"""A stop the store could not keep when it was pressed (the store locked) is kept once the
store is back: not held in this process's memory alone, where a restart (or another bench
on the store, reaching the same instrument) never learns of it."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.interlocks import STOPS
from bench_gate.lifecycle import SWEEP_SECONDS
from bench_gate.models import Principal
from bench_gate.store import SqliteStore
from tests.conftest import Clock
from tests.core.test_emergency_stop import energize, outputs


async def test_a_stop_pressed_while_the_store_was_locked_is_kept_once_it_is_back(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    # Its writes give up on the locked store at once (the default, 5 s, only made it wait).
    gw = Gateway(config, SqliteStore(db_path, busy_timeout=0.2), clock=clock)
    await gw.start()
    try:
        await energize(gw, script, olga)
        other = sqlite3.connect(db_path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # a backup, a stuck process: the store locked
            done = await asyncio.wait_for(gw.emergency_stop(olga, "test", "psu"), 60)
            assert "store_error" in done, done
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert outputs(front_panel) == [0, 0, 0]
        # The store is back for a few sweeps (the bound): the stop is kept in it.
        deadline = time.monotonic() + 4 * SWEEP_SECONDS + 1
        while not any(key.endswith("/psu") for key, _ in gw.store.kv_items(STOPS)):
            if time.monotonic() > deadline:
                break  # the restart below says what is missing
            await asyncio.sleep(0.05)
    finally:
        await gw.close()
        gw.store.close()
    # The restart (a crash, an update): the stop is still in force; nothing energizes.
    again = Gateway(config, SqliteStore(db_path), clock=clock)
    await again.start()
    try:
        assert "psu" in again.stopped(), again.stopped()
        run = again.create_run(Principal(name="bot2"), "script")
        refused = await again.submit(run.id, "psu", "OUTP 1,(@1)")
        assert refused.status == "refused" and refused.code == -203, refused
        assert "psu is stopped" in refused.reason and "olga" in refused.reason
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            assert outputs(front_panel) == [0, 0, 0]
            await asyncio.sleep(0.2)
    finally:
        await again.close()
        again.store.close()
