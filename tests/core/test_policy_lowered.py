"""bench.toml lowers ``policy.max_timeout_minutes`` and the gateway restarts while a
request asked under the old policy waits: it had been let wait longer than the bench
allows now, and a person's approval after the new limit ran it. A request whose wait is
longer than the policy allows at the start expires then (an expiry is a denial, its run
not counted against); one within it waits on. The supply's state on its own port."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bench_gate.config import BenchConfig
from bench_gate.errors import TransitionError
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from bench_gate.store import SqliteStore
from tests.conftest import Clock


async def test_a_request_asked_to_wait_longer_than_the_policy_allows_now_expires(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    config.policy.max_timeout_minutes = 240
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script", goal="slow review")
        long = (await gw.submit(run.id, "psu", "VOLT 2,(@1)", timeout_minutes=240)).request
        short = (await gw.submit(run.id, "psu", "VOLT 1,(@2)", timeout_minutes=20)).request
        assert long is not None and short is not None
    finally:
        await gw.close()
        gw.store.close()
    lowered = config.model_copy(deep=True)
    lowered.policy.max_timeout_minutes = 60
    clock.advance(minutes=90)  # under the old policy it still waits; under the new, no more
    gw = Gateway(lowered, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        with pytest.raises(TransitionError):  # a person approves it, at minute 90
            await gw.grant(long.id, olga, ["setpoint"], proposal_hash=long.proposal_hash)
        assert Decimal(front_panel.query("VOLT? (@1)")) == 0, "it ran"
        after = gw.get_request(long.id)
        assert after.status is Status.EXPIRED, after.status
        assert "max_timeout_minutes" in (after.outcome or ""), after.outcome
        assert gw.get_run(run.id).denials_in_a_row == 1  # the short one's, not this one's
    finally:
        await gw.close()
        gw.store.close()
    assert Decimal(front_panel.query("VOLT? (@1)")) == 0
