"""Standing plans, the confidence gate and denial limits, on the simulated bench."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from bench_gate.confidence import apply_env, score, threshold_for
from bench_gate.config import BenchConfig, ConfidenceConfig, Costs
from bench_gate.errors import InvalidInput
from bench_gate.gateway import Gateway
from bench_gate.models import ApprovalKind, EventType, Principal, RunStatus, Status
from bench_gate.plans import PlanStatus
from bench_gate.store import SqliteStore
from tests.conftest import Clock

SWEEP_SCOPE = {"instrument": "psu", "channels": [1], "voltage": [0, 5], "current_max": 0.5,
               "max_step": 0.5, "output_enable": True, "max_writes": 40, "timeout_minutes": 30}


def journal(gw: Gateway, run_id: str, kind: EventType) -> list[dict[str, Any]]:
    return [e.data for e in gw.store.journal(run_id, limit=10_000) if e.type is kind]


async def active_plan(gw: Gateway, run_id: str, olga: Principal, pete: Principal,
                      scope: dict[str, Any] | None = None) -> str:
    req = await gw.request_plan(run_id, scope or SWEEP_SCOPE, rationale="IV sweep of CH1")
    assert req.required == [ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE]
    assert "voltage setpoints from 0.0 V to 5.0 V" in req.actions[0].words
    first = await gw.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    assert first.request.status is Status.PENDING, "a plan needs both approvals"
    done = await gw.grant(req.id, pete, ["output_enable"], proposal_hash=req.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.request.outcome
    assert req.plan_id is not None
    return req.plan_id


async def test_sweep_inside_a_plan_needs_no_clicks(gateway: Gateway, script: Principal,
                                                   olga: Principal, pete: Principal,
                                                   front_panel: Any) -> None:
    run = gateway.create_run(script, "script", goal="IV curve")
    plan_id = await active_plan(gateway, run.id, olga, pete)
    await gateway.submit(run.id, "psu", "CURR 0.5,(@1)")
    assert (await gateway.submit(run.id, "psu", "OUTP ON,(@1)")).status == "executed"
    for step in range(21):
        volts = Decimal("0.25") * step
        result = await gateway.submit(run.id, "psu", f"VOLT {volts},(@1)")
        assert result.status == "executed", result.reason
        assert Decimal(front_panel.query("VOLT? (@1)")) == volts
    completed = journal(gateway, run.id, EventType.STEP_COMPLETED)
    assert sum(1 for c in completed if c.get("plan_id") == plan_id) >= 23
    assert gateway.list_requests(status=Status.PENDING) == []
    plan = gateway.get_plan(plan_id)
    assert plan.writes_used == 23 and plan.writes_left == 17

    # Outside the plan: held as an ordinary request.
    for message in ("VOLT 5.5,(@1)", "VOLT 1,(@2)", "VOLT:PROT 6,(@1)", "VOLT 3,(@1)"):
        held = await gateway.submit(run.id, "psu", message)
        assert held.status == "pending", message
    assert Decimal(front_panel.query("VOLT? (@1)")) == 5

    # Revoked: the sweep stops at once.
    gateway.revoke_plan(plan_id, olga)
    assert (await gateway.submit(run.id, "psu", "VOLT 4.75,(@1)")).status == "pending"
    assert gateway.list_plans(run.id)[0].status is PlanStatus.REVOKED


async def test_plan_count_and_expiry(gateway: Gateway, script: Principal, olga: Principal,
                                     pete: Principal, clock: Clock) -> None:
    run = gateway.create_run(script, "script")
    plan_id = await active_plan(gateway, run.id, olga, pete, {**SWEEP_SCOPE, "max_writes": 2})
    assert (await gateway.submit(run.id, "psu", "VOLT 0.5,(@1)")).status == "executed"
    assert (await gateway.submit(run.id, "psu", "VOLT 1,(@1)")).status == "executed"
    assert gateway.get_plan(plan_id).status is PlanStatus.EXHAUSTED
    assert (await gateway.submit(run.id, "psu", "VOLT 1.5,(@1)")).status == "pending"
    other = await active_plan(gateway, run.id, olga, pete)
    clock.advance(minutes=31)
    assert (await gateway.submit(run.id, "psu", "VOLT 1.25,(@1)")).status == "pending"
    assert gateway.get_plan(other).status is PlanStatus.EXPIRED


async def test_plan_scope_must_fit_the_envelope(gateway: Gateway, script: Principal) -> None:
    run = gateway.create_run(script, "script")
    with pytest.raises(InvalidInput, match="above the bench limit of 12"):
        await gateway.request_plan(run.id, {**SWEEP_SCOPE, "channels": [2],
                                            "voltage": [0, 20]})
    with pytest.raises(InvalidInput, match="min <= max"):
        await gateway.request_plan(run.id, {**SWEEP_SCOPE, "voltage": [3, 1]})
    with pytest.raises(InvalidInput, match="no channel 7"):
        await gateway.request_plan(run.id, {**SWEEP_SCOPE, "channels": [7]})


async def test_plan_without_output_enable_holds_energizing(gateway: Gateway, script: Principal,
                                                           olga: Principal) -> None:
    run = gateway.create_run(script, "script")
    req = await gateway.request_plan(run.id, {**SWEEP_SCOPE, "output_enable": False})
    assert req.required == [ApprovalKind.SETPOINT]
    await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    assert (await gateway.submit(run.id, "psu", "VOLT 0.5,(@1)")).status == "executed"
    assert (await gateway.submit(run.id, "psu", "OUTP ON,(@1)")).status == "pending"


async def test_denied_plan_request_leaves_no_plan(gateway: Gateway, script: Principal,
                                                  olga: Principal) -> None:
    run = gateway.create_run(script, "script")
    req = await gateway.request_plan(run.id, SWEEP_SCOPE)
    await gateway.deny(req.id, olga, "not this week", proposal_hash=req.proposal_hash)
    assert gateway.list_plans(run.id)[0].status is PlanStatus.DENIED
    assert (await gateway.submit(run.id, "psu", "VOLT 1,(@1)")).status == "pending"


# ---------------------------------------------------------------- confidence gate

def test_threshold_from_costs() -> None:
    config = ConfidenceConfig(costs={"setpoint": Costs(review=1, wrong=10),
                                     "output_enable": Costs(review=1, wrong=50)})
    assert threshold_for(config, "setpoint") == pytest.approx(0.9)
    assert threshold_for(config, "output_enable") == pytest.approx(0.98)
    assert threshold_for(config, "state") == 0.75


def test_environment_overrides() -> None:
    config = apply_env(ConfidenceConfig(), {
        "BENCH_GATE_CONFIDENCE_GATE": "on", "BENCH_GATE_CONFIDENCE_GATE_THRESHOLD": "0.6",
        "BENCH_GATE_CONFIDENCE_ESTIMATOR": "self-consistency",
        "BENCH_GATE_CONFIDENCE_SAMPLES": "40", "BENCH_GATE_CONFIDENCE_CALIBRATE": "1"})
    assert config.enabled and config.threshold == 0.6 and config.calibrate
    assert config.estimator == "self-consistency" and config.samples == 9
    assert not apply_env(ConfidenceConfig(), {"BENCH_GATE_CONFIDENCE_GATE": "0"}).enabled


@pytest.mark.parametrize(("stated", "rationale", "expected"), [
    (None, "Confidence: 85% that 3.3 V is the rail", 0.85),
    (None, "confidence 0.62", 0.62),
    (0.9, "Confidence: 10%", 0.9),
    (None, "the datasheet says 3.3 V", 0.0),
    (None, None, 0.0),
])
async def test_verbalization(stated: float | None, rationale: str | None,
                             expected: float) -> None:
    result = await score(ConfidenceConfig(), stated=stated, rationale=rationale, action="x",
                         goal=None, trajectory=[])
    assert result.value == pytest.approx(expected)
    assert result.estimator == "verbalization"


class StandIn(BaseHTTPRequestHandler):
    """A local OpenAI-compatible endpoint answering from a fixed script."""

    answers: ClassVar[list[str]] = []
    seen: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        StandIn.seen.append(body)
        text = StandIn.answers[(len(StandIn.seen) - 1) % len(StandIn.answers)]
        payload = json.dumps({"choices": [{"message": {"content": text}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    StandIn.seen = []
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/chat/completions"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("answers", "expected"), [
    (["YES"], 1.0), (["YES", "NO"], 0.6), (["NO"], 0.0)])
async def test_self_consistency(endpoint: str, answers: list[str], expected: float) -> None:
    StandIn.answers = answers
    config = ConfidenceConfig(estimator="self-consistency", samples=5, endpoint=endpoint)
    result = await score(config, stated=None, rationale=None, action="VOLT 3,(@1)",
                         goal="bring up", trajectory=["*IDN?"])
    assert result.value == pytest.approx(expected)
    assert result.estimator == "self-consistency"
    assert len(StandIn.seen) == 5
    assert '"VOLT 3,(@1)"' in StandIn.seen[0]["messages"][-1]["content"]


async def test_self_consistency_unreachable_fails_closed() -> None:
    """Never the requester's own stated confidence: an estimator error scores 0
    (tests/core/test_confidence_gate.py drives every kind of error through the HTTP door)."""
    config = ConfidenceConfig(estimator="self-consistency",
                              endpoint="http://127.0.0.1:9/v1/chat/completions")
    result = await score(config, stated=None, rationale="Confidence: 80%", action="x",
                         goal=None, trajectory=[])
    assert result.value == 0 and result.estimator == "self-consistency"
    assert result.note.startswith("estimator failed, so a person decides: cannot reach "
                                  "http://127.0.0.1:9/v1/chat/completions")


async def test_gate_diverts_unsure_agent_writes(gateway: Gateway, olga: Principal,
                                                pete: Principal,
                                                front_panel: Any) -> None:
    gateway.config.confidence.enabled = True
    agent = Principal(name="agent-1", role="requester")  # type: ignore[arg-type]
    run = gateway.create_run(agent, "agent", goal="find the 3V3 rail current")
    await active_plan(gateway, run.id, olga, pete)
    sure = await gateway.submit(run.id, "psu", "VOLT 0.5,(@1)",
                                rationale="Confidence: 90%, per the schematic")
    assert sure.status == "executed"
    silent = await gateway.submit(run.id, "psu", "VOLT 1,(@1)", step_id="s2")
    assert silent.status == "pending" and silent.request is not None
    assert silent.request.handoff["confidence_gate"]["reason"] == "confidence 0.00 < 0.75"
    assert silent.request.handoff["risk"]["signals"][0] == "confidence 0.00 < 0.75"
    unsure = await gateway.submit(run.id, "psu", "VOLT 1,(@1)", confidence=0.62, step_id="s3")
    assert unsure.request is not None
    assert unsure.request.handoff["confidence_gate"]["reason"] == "confidence 0.62 < 0.75"
    evaluated = journal(gateway, run.id, EventType.CONFIDENCE_EVALUATED)
    assert [e["decision"] for e in evaluated] == ["execute", "divert", "divert"]
    assert evaluated[0]["estimator"] == "verbalization"
    assert sum(1 for e in journal(gateway, run.id, EventType.COMMAND_RECEIVED)
               if e.get("message") == "VOLT 1,(@1)") == 2, "each command journaled once"
    await gateway.grant(silent.request.id, olga, ["setpoint"],
                        proposal_hash=silent.request.proposal_hash)
    await gateway.deny(unsure.request.id, olga, "wait for the thermal check",
                       proposal_hash=unsure.request.proposal_hash)
    failed = journal(gateway, run.id, EventType.STEP_FAILED)
    assert any("diverted step denied" in f["reason"] for f in failed)
    assert Decimal(front_panel.query("VOLT? (@1)")) == 1


async def test_calibration_lowers_the_score_after_bad_feedback(gateway: Gateway,
                                                               olga: Principal,
                                                               pete: Principal) -> None:
    gateway.config.confidence.enabled = True
    gateway.config.confidence.calibrate = True
    agent = Principal(name="agent-2", role="requester")  # type: ignore[arg-type]
    run = gateway.create_run(agent, "agent")
    await active_plan(gateway, run.id, olga, pete)
    for i in range(3):
        ok = await gateway.submit(run.id, "psu", f"VOLT {i / 4},(@1)", confidence=0.8,
                                  step_id=f"step-{i}")
        assert ok.status == "executed"
    gateway.feedback(run.id, "step-0", 1, "wrong rail", olga)
    gateway.feedback(run.id, "step-1", 2, "overshoot", pete)
    gateway.feedback(run.id, "step-2", 1, "not counted: the requester's", agent)
    with pytest.raises(InvalidInput):
        gateway.feedback(run.id, "step-2", 9, who=olga)
    after = await gateway.submit(run.id, "psu", "VOLT 0.75,(@1)", confidence=0.8,
                                 step_id="step-3")
    assert after.status == "pending"
    evaluated = journal(gateway, run.id, EventType.CONFIDENCE_EVALUATED)[-1]
    assert evaluated["regret"] == pytest.approx(2 / 3)
    assert evaluated["score"] == pytest.approx(0.8 * (1 - 2 / 3), abs=1e-3)
    assert evaluated["decision"] == "divert"


async def test_scripts_are_not_gated(gateway: Gateway, script: Principal, olga: Principal,
                                     pete: Principal) -> None:
    gateway.config.confidence.enabled = True
    run = gateway.create_run(script, "script")
    await active_plan(gateway, run.id, olga, pete)
    assert (await gateway.submit(run.id, "psu", "VOLT 0.5,(@1)")).status == "executed"
    assert journal(gateway, run.id, EventType.CONFIDENCE_EVALUATED) == []


# ---------------------------------------------------------------- denial limits

async def test_three_denials_in_a_row_suspend_the_run(gateway: Gateway, script: Principal,
                                                      olga: Principal) -> None:
    run = gateway.create_run(script, "script")
    for i in range(3):
        req = (await gateway.submit(run.id, "psu", f"VOLT {i + 1},(@1)")).request
        assert req is not None
        await gateway.deny(req.id, olga, f"no {i}", proposal_hash=req.proposal_hash)
    assert gateway.get_run(run.id).status is RunStatus.SUSPENDED
    refused = await gateway.submit(run.id, "psu", "VOLT 1,(@1)")
    assert refused.status == "refused" and "suspended" in refused.reason
    assert (await gateway.submit(run.id, "psu", "*IDN?")).status == "executed"
    assert journal(gateway, run.id, EventType.RUN_SUSPENDED)[0]["in_a_row"] == 3
    gateway.release(run.id, olga)
    assert (await gateway.submit(run.id, "psu", "VOLT 1,(@1)")).status == "pending"


async def test_an_approval_resets_the_row_but_not_the_total(gateway: Gateway,
                                                            script: Principal,
                                                            olga: Principal,
                                                            clock: Clock) -> None:
    gateway.config.policy.denials_total = 5
    run = gateway.create_run(script, "script")
    for i in range(5):
        req = (await gateway.submit(run.id, "psu", f"VOLT {i / 10},(@1)")).request
        assert req is not None
        if i == 2:
            await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
            continue
        if i == 4:
            clock.advance(minutes=31)  # an expiry counts as a denial
            await gateway.sweep()
            continue
        await gateway.deny(req.id, olga, "no", proposal_hash=req.proposal_hash)
    run_now = gateway.get_run(run.id)
    assert run_now.denials_total == 4 and run_now.denials_in_a_row == 2
    assert run_now.status is RunStatus.ACTIVE
    req = (await gateway.submit(run.id, "psu", "VOLT 0.9,(@1)")).request
    assert req is not None
    await gateway.deny(req.id, olga, "no", proposal_hash=req.proposal_hash)
    final = gateway.get_run(run.id)
    assert final.status is RunStatus.SUSPENDED and final.denials_total == 5
    assert final.takeover_reason == "suspended after 3 denials in a row"


async def test_total_denials_suspend_the_run(gateway: Gateway, script: Principal,
                                             olga: Principal) -> None:
    gateway.config.policy.denials_total = 4
    run = gateway.create_run(script, "script")
    for i in range(4):
        req = (await gateway.submit(run.id, "psu", f"VOLT {i / 10},(@1)")).request
        assert req is not None
        if i % 2:
            await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
        else:
            await gateway.deny(req.id, olga, "no", proposal_hash=req.proposal_hash)
    for i in range(2):
        req = (await gateway.submit(run.id, "psu", f"VOLT {i / 10 + 1},(@1)")).request
        assert req is not None
        await gateway.deny(req.id, olga, "no", proposal_hash=req.proposal_hash)
    final = gateway.get_run(run.id)
    assert final.status is RunStatus.SUSPENDED
    assert final.takeover_reason == "suspended after 4 denials in all"


async def test_a_plan_approved_while_its_bench_was_away_never_activates_after_expiry(
        config: BenchConfig, db_path: Path, script: Principal, olga: Principal,
        pete: Principal, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its last approval came while the bench was away (another gateway took it); the bench
    came back after the request expired. Activation came before the expiry check, so the
    plan went live, a standing approval nobody had granted in time."""
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    run = gw.create_run(script, "script", goal="IV curve")
    req = await gw.request_plan(run.id, SWEEP_SCOPE, rationale="IV sweep of CH1")
    await gw.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    with monkeypatch.context() as away:
        away.setattr(gw.core, "owns", lambda r: False)  # not this bench's to run now
        done = await gw.grant(req.id, pete, ["output_enable"], proposal_hash=req.proposal_hash)
    assert done.request.status is Status.APPROVED, done.request.outcome
    await gw.close()
    gw.store.close()
    clock.advance(hours=48)
    back = Gateway(config, SqliteStore(db_path), clock=clock)
    await back.start()  # the bench is back: it runs what is approved and its own
    try:
        for _ in range(100):
            if back.get_request(req.id).status is not Status.APPROVED:
                break
            await asyncio.sleep(0.02)
        assert back.get_request(req.id).status is Status.EXPIRED
        assert req.plan_id is not None
        assert back.get_plan(req.plan_id).status is PlanStatus.DENIED  # its request expired
    finally:
        await back.close()
        back.store.close()
