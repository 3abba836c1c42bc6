"""The tools' bench in-process, on the gateway core (the endpoint mounted at ``/mcp``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..doorway import UNDECIDED, answer, follow, problem_of, submit
from ..errors import GatewayError, Refused, WrongInstrument
from ..gateway import Gateway
from ..models import Principal, RunKind, TakeoverRequest
from ..questions import QuestionSet
from ..wire import rfc3339, wire
from ._backend import ToolFailure
from ._results import Answers, InstrumentInfo, InstrumentState, Pending, WriteOutcome

__all__ = ["CoreBench", "answers_of"]

T = TypeVar("T")


def _failure(exc: GatewayError) -> ToolFailure:
    return ToolFailure(problem_of(exc).tool_kind, exc.message,
                       exc.code if isinstance(exc, Refused) else
                       problem_of(exc).scpi if isinstance(exc, WrongInstrument) else None)


def outcome_of(req: TakeoverRequest) -> WriteOutcome:
    pending = None
    if req.status in UNDECIDED:
        pending = Pending(takeover_id=req.id, required_approvals=[k.value for k in req.required],
                          approvals_missing=[k.value for k in req.missing()],
                          expires_at=rfc3339(req.expires_at),
                          commands=[a.canonical for a in req.actions],
                          operator_sees=wire(req.handoff))
    receipt = wire(req.receipt.model_dump(mode="json")) if req.receipt is not None else None
    return WriteOutcome(status=req.status.value, takeover_id=req.id, response=answer(req),
                        receipt=receipt, notes=req.notes, outcome=req.outcome, pending=pending,
                        plan_id=req.plan_id)


def answers_of(ask: QuestionSet) -> Answers:
    return Answers(question_id=ask.id, status=ask.status.value,
                   answers=[a.model_dump() for a in ask.answers] if ask.answers else None,
                   answered_by=ask.answered_by, notes=ask.notes, outcome=ask.outcome,
                   expires_at=rfc3339(ask.expires_at))


class CoreBench:
    """:class:`~bench_gate.mcp._backend.Bench` on a started gateway, for ``principal``."""

    def __init__(self, gateway: Gateway, principal: Principal) -> None:
        self.gateway = gateway
        self.principal = principal

    @staticmethod
    async def _call(fn: Callable[[], Awaitable[T]]) -> T:
        try:
            return await fn()
        except GatewayError as exc:
            raise _failure(exc) from exc

    def _own(self, run_id: str) -> None:
        self.gateway.owned_run(self.principal, run_id, "acts on it")

    async def create_run(self, goal: str) -> str:
        async def go() -> str:
            run = self.gateway.create_run(self.principal, RunKind.AGENT, goal,
                                          attached="mcp")
            self.gateway.client_connected(run.id, True)  # renews its leases while open
            return run.id
        return await self._call(go)

    async def close_run(self, run_id: str, reason: str | None = None) -> None:
        async def go() -> None:
            self.gateway.client_connected(run_id, False)
            if reason is None:
                self.gateway.close_run(run_id)
            else:
                self.gateway.close_run(run_id, reason)
        await self._call(go)

    async def heartbeat(self, run_id: str) -> None:
        """Nothing to say: an in-process session's run lives and dies with the session."""

    async def emergency_stop(self, instrument: str | None) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            return await self.gateway.emergency_stop(self.principal, "MCP", instrument)
        return await self._call(go)

    async def instruments(self) -> list[InstrumentInfo]:
        return [InstrumentInfo(name=ic.name, profile=ic.profile, resource=ic.resource,
                               lock=(lock := self.gateway.instrument_lock(ic.name)).words,
                               lock_warning=lock.warning, wrong_instrument=self.gateway
                               .instrument_identity(ic.name)["words"])
                for ic in self.gateway.config.instruments]

    async def state(self, instrument: str) -> InstrumentState:
        async def go() -> InstrumentState:
            return InstrumentState.model_validate(await self.gateway.live_state(instrument))
        return await self._call(go)

    async def submit(self, run_id: str, instrument: str, command: str, *,
                     rationale: str | None = None, confidence: float | None = None,
                     step_id: str | None = None) -> WriteOutcome:
        async def go() -> WriteOutcome:
            self._own(run_id)
            result = await submit(self.gateway, run_id, instrument, command,
                                  rationale=rationale, confidence=confidence, step_id=step_id)
            if result.request is None:
                return WriteOutcome(status=result.status, response=result.response)
            return outcome_of(result.request)
        return await self._call(go)

    async def wait(self, takeover_id: str, timeout: float) -> WriteOutcome:
        async def go() -> WriteOutcome:
            self._own(self.gateway.get_request(takeover_id).run_id)
            return outcome_of(await follow(self.gateway, takeover_id, timeout))
        return await self._call(go)

    async def request_plan(self, run_id: str, scope: dict[str, Any],
                           rationale: str | None) -> WriteOutcome:
        async def go() -> WriteOutcome:
            self._own(run_id)
            return outcome_of(await self.gateway.request_plan(run_id, scope, rationale))
        return await self._call(go)

    async def ask(self, run_id: str, questions: list[dict[str, Any]],
                  timeout_minutes: int | None) -> Answers:
        async def go() -> Answers:
            return answers_of(self.gateway.questions.ask(run_id, self.principal,
                                                         list(questions), timeout_minutes))
        return await self._call(go)

    async def wait_answer(self, question_id: str, timeout: float) -> Answers:
        async def go() -> Answers:
            ask = self.gateway.questions.get(question_id)
            self._own(ask.run_id)
            return answers_of(await self.gateway.questions.wait(question_id, timeout))
        return await self._call(go)
