"""The tools' bench over the HTTP API (``bench-gate mcp --url``), through bench_gate.client.

The client is synchronous; each call runs in a worker thread so the MCP session's event loop
never blocks (a long-poll holds one worker thread, never the loop).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

from ..client import ApiError, Client, segment
from ..doorway import UNDECIDED, tool_kind
from ._backend import ToolFailure
from ._results import Answers, InstrumentInfo, InstrumentState, Pending, WriteOutcome

__all__ = ["HttpBench"]

T = TypeVar("T")
LONG_POLL = 60.0


def _failure(exc: ApiError) -> ToolFailure:
    kind = tool_kind(str(exc.problem.get("type") or ""), exc.status)
    return ToolFailure(kind, exc.reason, exc.scpi_code)


def outcome_of(tk: dict[str, Any], response: str | None = None) -> WriteOutcome:
    pending = None
    if tk["status"] in UNDECIDED:
        pending = Pending(takeover_id=tk["id"], required_approvals=tk["required"],
                          approvals_missing=tk["approvalsMissing"], expires_at=tk["expiresAt"],
                          commands=tk["commands"], operator_sees=tk.get("handoff") or {})
    receipt = tk.get("receipt")
    if response is None and tk["status"] == "executed" and receipt:
        response = receipt.get("detail") or None
    return WriteOutcome(status=tk["status"], takeover_id=tk["id"], response=response,
                        receipt=receipt, notes=tk.get("notes"), outcome=tk.get("outcome"),
                        pending=pending, plan_id=tk.get("planId"))


def answers_of(q: dict[str, Any]) -> Answers:
    return Answers(question_id=q["id"], status=q["status"], answers=q.get("answers"),
                   answered_by=q.get("answeredBy"), notes=q.get("notes") or "",
                   outcome=q.get("outcome"), expires_at=q["expiresAt"])


class HttpBench:
    """:class:`~bench_gate.mcp._backend.Bench` over a running server's HTTP API."""

    def __init__(self, client: Client, heartbeat_seconds: int | None = None) -> None:
        self.client = client
        #: The run's term: it closes if this process goes silent that long (terms.py).
        self.heartbeat_seconds = heartbeat_seconds

    @staticmethod
    async def _call(fn: Callable[[], T]) -> T:
        try:
            return await anyio.to_thread.run_sync(fn)
        except ApiError as exc:
            raise _failure(exc) from exc

    async def create_run(self, goal: str) -> str:
        body: dict[str, Any] = {"kind": "agent", "goal": goal}
        if self.heartbeat_seconds is not None:
            body["heartbeatSeconds"] = self.heartbeat_seconds
        run = await self._call(lambda: self.client.request("POST", "/v1/runs", json=body))
        return str(run["id"])

    async def heartbeat(self, run_id: str) -> None:
        await self._call(lambda: self.client.request(
            "POST", f"/v1/runs/{segment(run_id)}/heartbeat"))

    async def close_run(self, run_id: str, reason: str | None = None) -> None:
        """Close the run: its undecided requests are cancelled, and it no longer counts
        against ``limits.open_runs``. If the server is away, they expire instead."""
        body = {"reason": reason} if reason else None
        with contextlib.suppress(ToolFailure):
            await self._call(lambda: self.client.request(
                "POST", f"/v1/runs/{segment(run_id)}/close", json=body))

    async def emergency_stop(self, instrument: str | None) -> dict[str, Any]:
        body = {"instrument": instrument} if instrument else {}
        out = await self._call(lambda: self.client.request("POST", "/v1/bench/stop",
                                                           json=body))
        return dict(out)

    async def instruments(self) -> list[InstrumentInfo]:
        rows = await self._call(lambda: self.client.request("GET", "/v1/instruments"))
        return [InstrumentInfo(name=r["name"], profile=r["profile"], resource=r["resource"],
                               lock=r.get("lock", "not lockable"),
                               lock_warning=r.get("lockWarning"),
                               wrong_instrument=r.get("wrongInstrument"))
                for r in rows]

    async def state(self, instrument: str) -> InstrumentState:
        body = await self._call(lambda: self.client.request(
            "GET", f"/v1/instruments/{segment(instrument)}/state"))
        return InstrumentState.model_validate(body)

    async def submit(self, run_id: str, instrument: str, command: str, *,
                     rationale: str | None = None, confidence: float | None = None,
                     step_id: str | None = None) -> WriteOutcome:
        result = await self._call(lambda: self.client.submit(
            instrument, command, run_id=run_id, rationale=rationale, confidence=confidence,
            stepId=step_id))
        tk = result.get("takeover")
        if tk is None:
            return WriteOutcome(status=result["status"], response=result.get("response"))
        return outcome_of(tk, result.get("response"))

    async def wait(self, takeover_id: str, timeout: float) -> WriteOutcome:
        outcome = await self._call(lambda: self.client.wait(takeover_id, timeout))
        return outcome_of(outcome.takeover, outcome.response)

    async def request_plan(self, run_id: str, scope: dict[str, Any],
                           rationale: str | None) -> WriteOutcome:
        body = {"instrument": scope["instrument"], "channels": scope["channels"],
                "voltage": [str(v) for v in scope["voltage"]],
                "currentMax": str(scope["current_max"]),
                "outputEnable": scope["output_enable"], "maxWrites": scope["max_writes"],
                "timeoutMinutes": scope["timeout_minutes"], "rationale": rationale}
        if scope.get("max_step") is not None:
            body["maxStep"] = str(scope["max_step"])
        result = await self._call(lambda: self.client.request(
            "POST", f"/v1/runs/{segment(run_id)}/plans", json=body))
        return outcome_of(result["takeover"])

    async def ask(self, run_id: str, questions: list[dict[str, Any]],
                  timeout_minutes: int | None) -> Answers:
        body: dict[str, Any] = {"questions": [
            {"text": q["text"], "allowFreeText": q.get("allow_free_text", False),
             "options": q["options"]} for q in questions]}
        if timeout_minutes is not None:
            body["timeoutMinutes"] = timeout_minutes
        q = await self._call(lambda: self.client.request(
            "POST", f"/v1/runs/{segment(run_id)}/questions", json=body))
        return answers_of(q)

    async def wait_answer(self, question_id: str, timeout: float) -> Answers:
        def poll() -> dict[str, Any]:
            deadline = time.monotonic() + timeout
            while True:
                left = max(0.0, deadline - time.monotonic())
                q: dict[str, Any] = self.client.request(
                    "GET", f"/v1/questions/{segment(question_id)}",
                    params={"wait": min(left, LONG_POLL)} if left > 0 else {})
                if q["status"] != "open" or time.monotonic() >= deadline:
                    return q
        return answers_of(await self._call(poll))
