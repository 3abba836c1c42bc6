"""Attacks on the emergency stop (docs/interlocks.md §1): a safe action that would wait for
something, and an output that would come back on around a stop. Every check of the
instrument is made on the simulator's own port."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from tests.core.test_emergency_stop import energize, outputs


async def wait_off(front_panel: Any, seconds: float) -> float | None:
    """Seconds until every output reads 0 on the simulator's own port, or None."""
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        if await asyncio.to_thread(outputs, front_panel) == [0, 0, 0]:
            return time.perf_counter() - started
        await asyncio.sleep(0.05)
    return None


async def test_stop_does_not_wait_for_a_locked_store(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any,
        db_path: Path) -> None:
    """Another writer holds SQLite's write lock (a backup, a `journal verify`, a stuck
    process): the outputs go off at once, the stop is in force, and it says the store could
    not keep it. It used to wait the store's 5 s busy timeout, then raise with every output
    still on."""
    run_id = await energize(gateway, script, olga)
    front_panel.write("OUTP 1,(@3)")
    waiting = (await gateway.submit(run_id, "psu", "VOLT 3,(@2)")).request
    assert waiting is not None
    other = sqlite3.connect(db_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # the store's write lock, held
        stop = asyncio.ensure_future(gateway.emergency_stop(olga, "test"))
        off = await wait_off(front_panel, 2.5)
        assert off is not None, f"outputs still {outputs(front_panel)} with the store locked"
        done = await asyncio.wait_for(stop, 60)
        assert "store_error" in done and "in force" in done["store_error"]
        assert done["instruments"]["psu"]["read_back"] == {
            "ch1.output": "0", "ch2.output": "0", "ch3.output": "0"}
        assert "psu" in gateway.stopped()
    finally:
        other.execute("ROLLBACK")
        other.close()
    # The store is back: the stop is still in force, nothing energizes until it is cleared.
    other_run = gateway.create_run(Principal(name="bot2"), "script")
    refused = await gateway.submit(other_run.id, "psu", "OUTP 1,(@1)")
    assert refused.status == "refused" and "psu is stopped" in refused.reason
    assert outputs(front_panel) == [0, 0, 0]
    # What the stop could not cancel is cancelled before the stop is cleared.
    assert sorted(gateway.clear_stop(olga)) == ["dmm", "psu"]
    assert gateway.get_request(waiting.id).status is Status.CANCELLED
    assert gateway.stopped() == {}
