"""The short CI version of ``bench/load.py``: socket and HTTP clients mixed on three simulated
instruments (a second PSU from a second SimBenchThread), with approved writes among them.
Zero errors, every message the simulators received whole and canonical, no interleaving on
an instrument (simulator log and journal). See docs/reliability.md section 6."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.load import pct, run_load
from bench_gate.gateway import Gateway
from bench_gate.models import Principal


def test_load_short(tmp_path: Path) -> None:
    res, _info = run_load(seconds=8, clients=12, tmp=tmp_path)
    assert res.errors == []
    assert len(res.socket_ms) > 100 and len(res.http_ms) > 100
    assert res.writes, "no write was approved and executed"
    assert len(res.checks) == 2
    assert pct(res.socket_ms + res.http_ms, 99) < 5000


async def test_two_approved_writes_on_one_instrument_recheck_one_after_the_other(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any) -> None:
    """Regression (found by bench/load.py: two writes' steps overlapped on psu2 in the
    journal): the recheck and the write were two lane jobs, so two requests approved at the
    same moment both rechecked the old value, then both wrote; the second ran against a
    state its approver never saw. Execution is now one at a time per instrument: the second
    recheck sees the first write and goes stale."""
    before = front_panel.query("VOLT? (@2)").strip()
    runs = [gateway.create_run(script, "script") for _ in range(2)]
    held = [await gateway.submit(r.id, "psu", f"VOLT {v},(@2)")
            for r, v in zip(runs, ("1.5", "2.5"), strict=True)]
    reqs = [h.request for h in held if h.request is not None]
    assert len(reqs) == 2
    results = await asyncio.gather(
        gateway.grant(reqs[0].id, olga, ["setpoint"], proposal_hash=reqs[0].proposal_hash),
        gateway.grant(reqs[1].id, pete, ["setpoint"], proposal_hash=reqs[1].proposal_hash))
    statuses = sorted(r.request.status.value for r in results)
    assert statuses == ["executed", "stale"], statuses
    executed = next(r.request for r in results if r.request.status.value == "executed")
    assert Decimal(front_panel.query("VOLT? (@2)")) == Decimal(
        executed.actions[0].new or "nan") != Decimal(before)
    events = [e for r in runs for e in gateway.store.journal(r.id, limit=1000)]
    started = [e for e in events if e.type.value == "step_started"]
    assert len(started) == 1
