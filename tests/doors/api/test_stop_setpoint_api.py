"""Hostile review (doors), over HTTP: a setpoint approved before an emergency stop does not
let one output enable switch the channel on after the stop is cleared
(tests/core/test_review_doors_stop.py has the rule; this is the same attack on the API,
proven on the simulator's own port)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..._http_bench import Bench, shown_hash, start_bench


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    yield from start_bench(tmp_path)


def test_one_click_after_a_cleared_stop_energizes_nothing(bench: Bench) -> None:
    with bench.http("bot") as bot, bench.http("olga") as olga, bench.http("oscar") as oscar:
        run = bot.post("/v1/runs", json={"kind": "script", "goal": "the DUT"}).json()["id"]
        held = bot.post(f"/v1/runs/{run}/scpi",
                        json={"instrument": "psu", "command": "VOLT 5,(@1)"}).json()
        tk = held["takeover"]["id"]
        done = olga.post(f"/v1/runs/{run}/takeover/{tk}/grant", json={
            "approve": ["setpoint"], "proposalHash": shown_hash(olga, tk)})
        assert done.json()["request"]["status"] == "executed", done.text
        assert olga.post("/v1/bench/stop", json={}).status_code == 200
        assert olga.post("/v1/bench/stop/clear", json={}).status_code == 200
        run2 = bot.post("/v1/runs", json={"kind": "script", "goal": "again"}).json()["id"]
        on = bot.post(f"/v1/runs/{run2}/scpi",
                      json={"instrument": "psu", "command": "OUTP ON,(@1)"})
        assert on.status_code == 202, on.text
        tk2 = on.json()["takeover"]["id"]
        assert "setpoint" in on.json()["takeover"]["approvalsMissing"], on.text
        one = oscar.post(f"/v1/runs/{run2}/takeover/{tk2}/grant", json={
            "approve": ["output_enable"], "proposalHash": shown_hash(oscar, tk2)})
        assert one.status_code == 200, one.text
        assert one.json()["request"]["status"] == "pending", one.text
    assert bench.psu("OUTP? (@1)") == "0"
