"""Only people who may judge teach the calibration (issue 15), over HTTP against a real
server on the simulated bench.

An operator and an admin score an agent's unattended steps low; the agent then scores the
same steps 5 (and one step 1). Before, the agent's feedback overwrote theirs, regret fell to
0 and the agent's next write ran unattended. Now feedback is kept per (step, person) with
the person's role, the agent's is journaled but never counts, and the next write is
diverted by the regret the judges gave.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bench_gate.config import ConfidenceConfig

from .._http_bench import Bench, start_bench

SCOPE: dict[str, Any] = {"instrument": "psu", "channels": [3], "voltage": [0, 2],
                         "currentMax": 0.2, "maxStep": 0.5, "outputEnable": True,
                         "maxWrites": 20, "timeoutMinutes": 30}


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("feedback-roles"))


def agent_with_plan(bench: Bench) -> str:
    with bench.http("bot") as h:
        run = str(h.post("/v1/runs", json={"kind": "agent", "goal": "ramp CH3"}).json()["id"])
        r = h.post(f"/v1/runs/{run}/plans", json=SCOPE)
        assert r.status_code == 202, r.text
        tk = r.json()["takeover"]
    for who, kind in (("olga", "setpoint"), ("oscar", "output_enable")):
        with bench.http(who) as h:
            r = h.post(f"/v1/runs/{run}/takeover/{tk['id']}/grant",
                       json={"approve": [kind], "proposalHash": tk["proposalHash"]})
            assert r.status_code == 200, r.text
    return run


def step(bench: Bench, run: str, volts: float, step_id: str) -> dict[str, Any]:
    with bench.http("bot") as h:
        r = h.post(f"/v1/runs/{run}/scpi", json={
            "instrument": "psu", "command": f"VOLT {volts},(@3)", "confidence": 0.9,
            "rationale": "next point of the ramp", "stepId": step_id})
    assert r.status_code in (200, 202), r.text
    body: dict[str, Any] = r.json()
    return body


def feedback(bench: Bench, who: str, run: str, step_id: str, score: int) -> dict[str, Any]:
    with bench.http(who) as h:
        r = h.post(f"/v1/runs/{run}/feedback", json={"stepId": step_id, "score": score,
                                                     "notes": f"{who} says {score}"})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_a_requester_cannot_erase_an_operators_regret(bench: Bench) -> None:
    assert bench.server.running is not None
    bench.server.running.gateway.config.confidence = ConfidenceConfig(
        enabled=True, calibrate=True, threshold=0.75)
    run = agent_with_plan(bench)
    for i in range(4):
        assert step(bench, run, 0.25 * (i + 1), f"s{i}")["status"] == "executed"

    judged = [feedback(bench, "olga", run, "s0", 1), feedback(bench, "olga", run, "s1", 2),
              feedback(bench, "ada", run, "s2", 1)]
    assert [(f["by"], f["role"], f["calibrates"]) for f in judged] == [
        ("olga", "operator", True), ("olga", "operator", True), ("ada", "admin", True)]
    # The agent praises every step the judges regretted, and regrets one they did not.
    pushed = [feedback(bench, "bot", run, s, 5) for s in ("s0", "s1", "s2")]
    pushed.append(feedback(bench, "bot", run, "s3", 1))
    assert all(f["by"] == "bot" and f["role"] == "requester" and not f["calibrates"]
               for f in pushed)
    # An operator changes their own mind on s1 only: their record, not the agent's.
    feedback(bench, "oscar", run, "s1", 5)

    diverted = step(bench, run, 1.25, "s4")
    assert diverted["status"] == "pending", diverted
    with bench.http("olga") as h:
        events = h.get(f"/v1/runs/{run}/journal", params={"limit": 1000}).json()["events"]
    [evaluated] = [e["data"] for e in events if e["type"] == "confidence_evaluated"
                   and e["data"]["step_id"] == "s4"]
    assert evaluated["regret"] == pytest.approx(3 / 4), "s0, s1 and s2: the judges' regret"
    assert evaluated["score"] == pytest.approx(0.9 * (1 - 3 / 4), abs=1e-3)
    assert evaluated["decision"] == "divert"
    given = [e["data"] for e in events if e["type"] == "feedback_given"]
    assert len(given) == 8, "every feedback is journaled, the requester's too"
    assert sum(1 for g in given if g["by"] == "bot" and g["calibrates"] is False) == 4
