"""An approval counts only if the journal holds it (rechecks.unjournaled); once the
journal's retention has archived its oldest events to segment files, an approval from
before the oldest event still in the store is excused (it was archived with them). The
approval's time is the request row's own word: a row edited behind the gateway's back,
its approval dated before the archive, ran its write unjournaled. An approval is excused
only for a request whose own start is archived too: a request whose
``takeover_requested`` event is still in the store has every approval there."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status, now
from bench_gate.store import SqliteStore, archive
from tests.conftest import Clock
from tests.core.test_crash_corridor import _forget_claim


async def test_an_approval_dated_before_the_archive_is_not_excused_for_a_request_after_it(
        config: BenchConfig, db_path: Path, tmp_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        early = (await gw.submit(run.id, "psu", "VOLT 0.5,(@3)")).request
        assert early is not None
        done = await gw.grant(early.id, olga, ["setpoint"], proposal_hash=early.proposal_hash)
        assert done.request.status is Status.EXECUTED
    finally:
        await gw.close()
        gw.store.close()
    store = SqliteStore(db_path)
    try:  # retention: everything journaled so far goes to segment files
        assert archive(store, now() + timedelta(seconds=1), tmp_path / "segments")
    finally:
        store.close()
    _forget_claim(db_path, config.bench)
    await asyncio.sleep(1.1)
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        held = (await gw.submit(run.id, "psu", "VOLT 2.5,(@1)")).request
        assert held is not None and held.status is Status.PENDING
    finally:
        await gw.close()
        gw.store.close()
    _forget_claim(db_path, config.bench)
    con = sqlite3.connect(db_path, isolation_level=None)
    try:  # the row edited: approved, by olga, "in 2001"
        data = json.loads(con.execute("SELECT data FROM requests WHERE id = ?",
                                      (held.id,)).fetchone()[0])
        data.update(status="approved", approvals=[{
            "kind": "setpoint", "by": "olga", "at": "2001-01-01T00:00:00+00:00",
            "notes": "", "proposal_hash": data["proposal_hash"], "people": [], "tokens": []}])
        con.execute("UPDATE requests SET status = 'approved', data = ? WHERE id = ?",
                    (json.dumps(data), held.id))
    finally:
        con.close()
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        after = gw.get_request(held.id)
        for _ in range(100):
            if after.status is not Status.APPROVED:
                break
            await asyncio.sleep(0.05)
            after = gw.get_request(held.id)
        assert after.status is Status.FAILED, after.outcome
        assert "not in the journal" in (after.outcome or ""), after.outcome
    finally:
        await gw.close()
        gw.store.close()
    assert float(front_panel.query("VOLT? (@1)")) == 0.0, "never written"


async def test_a_plan_whose_approval_was_archived_with_its_request_still_runs(
        config: BenchConfig, db_path: Path, tmp_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    """The excuse stands where it is true: a plan approved, then its request and approval
    archived (retention), still covers its writes."""
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        asked = await gw.request_plan(run.id, {
            "instrument": "psu", "channels": [1], "voltage": [0, 5], "current_max": 0.5,
            "output_enable": False, "max_writes": 10, "timeout_minutes": 60})
        done = await gw.grant(asked.id, olga, ["setpoint"], proposal_hash=asked.proposal_hash)
        assert done.request.status is Status.EXECUTED, done.request.outcome
        assert archive(gw.store, now() + timedelta(seconds=1), tmp_path / "segments")
        await asyncio.sleep(1.1)
        inside = await gw.submit(run.id, "psu", "VOLT 1.5,(@1)")
        assert inside.status == "executed", inside
    finally:
        await gw.close()
        gw.store.close()
    assert float(front_panel.query("VOLT? (@1)")) == 1.5
