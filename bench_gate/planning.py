"""Plans in the core: ask for one (a takeover request whose proposal is the scope),
activate it once approved, revoke it, and run a write inside a live plan. A run's plan is
judged and spent one decision at a time, so its write units are spent atomically and
``writesUsed`` is exact (docs/plans.md).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from pydantic import ValidationError

from .approvals import require_operator
from .auth import held_at, refuse_token, revoked_tokens
from .calibration import Calibration
from .core import Core, Instrument, Part, new_id
from .errors import InvalidInput, NotFound, Refused
from .executor import Executor
from .handoff import build_handoff
from .models import (
    Action,
    Approval,
    ApprovalKind,
    Event,
    EventType,
    Principal,
    Run,
    RunStatus,
    Status,
    TakeoverRequest,
    proposal_hash,
)
from .plan_ends import close, end, settle
from .plan_gate import divert
from .plans import (
    Plan,
    PlanScope,
    PlanStatus,
    covers,
    is_plan_request,
    number_problem,
    outside_bench,
    scope_words,
)
from .runs import Runs
from .scpi import Classification, Effect
from .snapshots import Snapshots
from .states import PLANS, TERMINAL, PlanEvent
from .states import Event as Move
from .takeover import Requests
from .wire import rfc3339

__all__ = ["PlanDesk"]


class PlanDesk(Part):
    """Plans in the core: ask for one (a takeover request whose proposal is the scope),
    activate it once approved, revoke it, and run a write inside a live plan, spending its
    write units atomically (one plan decision at a time per run)."""

    def __init__(self, core: Core, snaps: Snapshots, requests: Requests, runs: Runs,
                 executor: Executor, calibration: Calibration) -> None:
        super().__init__(core)
        self.snaps = snaps
        self.requests = requests
        self.runs = runs
        self.executor = executor
        self.calibration = calibration
        #: Plans whose end this process has not finished (plan_ends.py).
        self._unsettled: set[str] = set()
        #: One plan decision at a time per run: judge, then spend, with nothing between.
        self._locks: dict[str, asyncio.Lock] = {}
        requests.listeners.append(self.on_move)
        runs.on_close.append(self.on_run_closed)
        executor.activate_plan = self.activate
        executor.interlocks.unsettled.append(self.settle)

    def plans_of(self, run_id: str) -> list[Plan]:
        return [Plan.model_validate(p) for p in self.store.kv_list("plans")
                if p.get("run_id") == run_id]

    def _here(self, plan: Plan, instrument: str) -> bool:
        """``plan`` covers this bench's ``instrument``: its scope names it, and it was asked
        for on this bench (a run may write through several gateways on one store, and two
        benches may both have a ``psu``: another bench's plan is for another DUT)."""
        if plan.scope.instrument != instrument:
            return False
        bench = plan.bench
        if not bench:  # a plan kept before plans named their bench: its request does
            asked = self.store.get_request(plan.request_id)
            bench = asked.bench if asked is not None else ""
        return bench == self.config.bench

    def same_instrument(self, plan: Plan, idn: str) -> bool:
        """Whether the instrument answering ``idn`` now is the one ``plan`` was approved
        on (its request's ``*IDN?``): bench.toml may point the plan's instrument name at
        another instrument, another DUT, which a person must look at."""
        asked = self.store.get_request(plan.request_id)
        return asked is not None and asked.snapshot.idn == idn

    def of_run(self, run_id: str) -> list[Plan]:
        self.runs.get(run_id)
        plans = self.plans_of(run_id)
        for plan in plans:
            self._refresh(plan)
        return sorted(plans, key=lambda p: p.created_at)

    def get(self, plan_id: str) -> Plan:
        raw = self.store.kv_get("plans", plan_id)
        if raw is None:
            raise NotFound(f"no plan {plan_id!r}")
        plan = Plan.model_validate(raw)
        self._refresh(plan)
        return plan

    def _save(self, plan: Plan) -> None:
        self.store.kv_put("plans", plan.id, plan.model_dump(mode="json"))

    def _refresh(self, plan: Plan) -> None:
        if plan.status is PlanStatus.ACTIVE and plan.expires_at is not None and \
                plan.expires_at <= self.clock():
            plan.status = PLANS.move(plan.id, plan.status, PlanEvent.EXPIRE)
            self._save(plan)
        gone = revoked_tokens(self.store).intersection(
            plan.tokens or self._kept_without(plan)) if plan.status is PlanStatus.ACTIVE else ()
        if gone and plan.status is PlanStatus.ACTIVE:
            # An approval given with a token revoked since no longer counts (invariant 3):
            # the plan ends, and its next write waits for a person.
            self._end(plan, f"the gateway: token {', '.join(sorted(gone))} was revoked",
                      tokens=sorted(gone))

    def _end(self, plan: Plan, by: str, request_id: str | None = None,
             stop: bool = False, **data: Any) -> None:
        """Revoke ``plan`` (pending or active) by ``by`` (plan_ends.py)."""
        self._unsettled.add(plan.id)  # until its end is done: a sweep finishes it
        end(self.core, self.requests, plan, by, request_id, data, stop=stop)
        if not stop:
            self._unsettled.discard(plan.id)

    def settle(self, at_start: bool = False) -> None:
        """At start, every plan's end a crash cut off; each sweep, this process's own (a
        stop's, or one the store refused midway): finished (plan_ends.py)."""
        if at_start or self._unsettled:
            ids = None if at_start else set(self._unsettled)
            settle(self.core, self.requests, ids)
            self._unsettled -= ids or set()

    def _kept_without(self, plan: Plan) -> set[str]:
        """A plan activated before plans kept their tokens: the tokens its approvers held
        when they approved it (``auth.held_at``), so it ends with them too."""
        asked = self.store.get_request(plan.request_id)
        return {t for a in (asked.valid_approvals() if asked is not None else [])
                for t in (a.tokens or held_at(self.store, [a.by], a.at.isoformat()))}

    def close(self, plan_id: str, event: PlanEvent) -> None:
        close(self.core, plan_id, event)

    async def request(self, run_id: str, scope: PlanScope | dict[str, Any],
                      rationale: str | None = None) -> TakeoverRequest:
        """Ask for a standing plan: a takeover request whose proposal is the plan's scope."""
        refuse_token(rationale, "rationale")
        run = self.runs.get(run_id)
        if (anonymous := self.runs.may_write(run)) is not None:  # a plan's writes are writes
            raise Refused(-203, anonymous)
        try:
            scope = PlanScope.model_validate(scope)
        except ValidationError as exc:
            first = exc.errors()[0]["loc"] if exc.errors() else ()
            raise InvalidInput("plan scope: " + "; ".join(
                f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()),
                field=str(first[0]) if first else None) from exc
        odd = number_problem(scope)
        if odd is not None:
            raise InvalidInput(f"plan scope: {odd[1]}", field=odd[0])
        inst = self.core.instrument(scope.instrument)
        limits = self.config.envelope.get(scope.instrument, {})
        outside = outside_bench(scope, inst.profile, limits)
        if outside is not None:
            raise InvalidInput(f"plan scope: {outside[1]}", field=outside[0])
        snap = await self.snaps.snapshot(inst, [(ch, f) for ch in scope.channels
                                                for f, spec in inst.profile.fields.items()
                                                if not spec.measured
                                                and inst.profile.has_field(f, ch)])
        if self.requests.stopped is not None:  # a plan would outlive the stop: -203
            self.requests.stopped(scope.instrument, None)
        plan_id = new_id("plan")
        words = scope_words(scope)
        actions = [Action(index=i, source=0, text=line, effect="plan", canonical=line,
                          words=line) for i, line in enumerate(words)]
        required = [ApprovalKind.SETPOINT] + (
            [ApprovalKind.OUTPUT_ENABLE] if scope.output_enable else [])
        created = self.clock()
        request_id = new_id("tk")
        req = TakeoverRequest(
            id=request_id, run_id=run.id, instrument=scope.instrument,
            message=f"plan: {'; '.join(words)}", actions=actions, required=required,
            reason=rationale or f"{run.kind.value} {run.principal} asks for a standing plan",
            rationale=rationale, timeout_minutes=self.requests.timeout(None), created_at=created,
            expires_at=created + timedelta(minutes=self.requests.timeout(None)), snapshot=snap,
            proposal_hash=proposal_hash(scope.instrument, [scope.digest(), *words], snap,
                                        request=request_id),
            plan_id=plan_id, bench=self.config.bench)
        history = self.store.recent(run.id, limit=40)
        req.handoff = build_handoff(req, run, inst.profile, limits, history, dict(snap.values))
        req.handoff["plan"] = {"id": plan_id, "scope": scope.model_dump(mode="json"),
                               "words": words}
        req.handoff["reversibility"] = (
            "standing approval: writes inside this scope will run without asking again"
            + (", outputs included" if scope.output_enable else ""))
        plan = Plan(id=plan_id, run_id=run.id, request_id=req.id, scope=scope,
                    scope_hash=scope.digest(), created_at=created, bench=self.config.bench)
        self._save(plan)
        stored = self.store.create_request(req, [Event(
            run_id=run.id, request_id=req.id, type=EventType.TAKEOVER_REQUESTED,
            data=req.handoff)])
        self.core.notifier.request_changed(stored)
        return stored

    def activate(self, req: TakeoverRequest) -> TakeoverRequest:
        assert req.plan_id is not None
        plan = self.get(req.plan_id)
        if plan.scope_hash != plan.scope.digest() or \
                req.handoff.get("plan", {}).get("scope") != plan.scope.model_dump(mode="json"):
            self.requests.move(req, Move.FAIL, EventType.STEP_FAILED,
                               {"reason": "the plan's scope changed after it was shown"},
                               outcome="failed: the plan's scope is not the one approved")
            return req
        if not self.requests.move(req, Move.START, EventType.STEP_STARTED, {"plan_id": plan.id}):
            return self.requests.get(req.id)
        plan.status = PLANS.move(plan.id, plan.status, PlanEvent.ACTIVATE)
        plan.expires_at = self.clock() + timedelta(minutes=plan.scope.timeout_minutes)
        plan.approved_by = sorted({a.by for a in req.valid_approvals()})
        plan.tokens = sorted({t for a in req.valid_approvals() for t in a.tokens})
        self._save(plan)
        self.store.append([Event(run_id=req.run_id, request_id=req.id,
                                 type=EventType.PLAN_ACTIVATED,
                                 data={"plan_id": plan.id, "by": plan.approved_by,
                                       "expires_at": plan.expires_at.isoformat(),
                                       "scope": plan.scope.model_dump(mode="json")})])
        self.requests.move(req, Move.FINISH, EventType.STEP_COMPLETED, {"plan_id": plan.id},
                           outcome=f"plan {plan.id} active until {rfc3339(plan.expires_at)}")
        return req

    def revoke(self, plan_id: str, operator: Principal) -> Plan:
        require_operator(operator)
        plan = self.get(plan_id)
        self._end(plan, operator.name)
        return plan

    async def try_plan(self, run: Run, inst: Instrument, message: str, c: Classification,
                       unjournaled: list[Event], *, rationale: str | None,
                       confidence: float | None,
                       step_id: str | None, idempotency_key: str | None,
                        ) -> TakeoverRequest | dict[str, Any] | None:
        """Run a write inside the run's live plan; or say why the gate diverts it; or None.

        A run's plan writes are judged and spent one at a time (a lock per run), so two
        concurrent writes can never both spend the last write. Every write unit counts."""
        if not any(p.status is PlanStatus.ACTIVE and self._here(p, inst.config.name)
                   for p in self.plans_of(run.id)):
            return None
        lock = self._locks.setdefault(run.id, asyncio.Lock())
        async with lock:
            return await self._spend(run, inst, message, c, unjournaled,
                                     rationale=rationale, confidence=confidence,
                                     step_id=step_id, idempotency_key=idempotency_key)

    async def _spend(self, run: Run, inst: Instrument, message: str, c: Classification,
                     unjournaled: list[Event], *, rationale: str | None,
                     confidence: float | None, step_id: str | None,
                     idempotency_key: str | None,
                          ) -> TakeoverRequest | dict[str, Any] | None:
        plans = [p for p in self.plans_of(run.id)  # read again, under the lock
                 if p.status is PlanStatus.ACTIVE and self._here(p, inst.config.name)]
        if not plans:
            return None
        actions = self.snaps.actions(inst, c, None)
        live = await self.snaps.snapshot(inst, self.snaps.fields(inst, actions))
        writes = sum(1 for u in c.units if u.writes
                     and u.effect not in (Effect.HARMLESS, Effect.MEASURE_CONFIG))
        plan = None
        for candidate in plans:
            self._refresh(candidate)
            if candidate.status is PlanStatus.ACTIVE and candidate.writes_left >= writes and \
                    self.same_instrument(candidate, live.idn) and \
                    covers(candidate, inst.config.name, c.units, live.values,
                           inst.profile) is None:
                plan = candidate
                break
        if plan is None:
            return None
        self.snaps.check_envelope(inst, self.snaps.actions(inst, c, live), live)
        why = await divert(self.config.confidence, self.calibration, self.store, run, actions,
                           message, unjournaled, rationale=rationale, confidence=confidence,
                           step_id=step_id, plan_id=plan.id)
        if why is not None:
            return why
        # Read again and spend with nothing awaited in between: a revoke, an expiry or a
        # closed run while this waited on the instrument or the gate is never written over.
        plan = self.get(plan.id)
        fresh_run = self.store.get_run(run.id)
        if plan.status is not PlanStatus.ACTIVE or plan.writes_left < writes or \
                fresh_run is None or fresh_run.status is not RunStatus.ACTIVE:
            return None
        plan.writes_used += writes
        if plan.writes_left == 0:
            plan.status = PLANS.move(plan.id, plan.status, PlanEvent.EXHAUST)
        self._save(plan)
        required = sorted({a.approval for a in actions if a.approval is not None},
                          key=list(ApprovalKind).index) or [ApprovalKind.STATE]
        created = self.clock()
        req = TakeoverRequest(
            id=new_id("tk"), run_id=run.id, instrument=inst.config.name, message=message,
            actions=self.snaps.actions(inst, c, live), required=required, status=Status.APPROVED,
            reason=f"inside plan {plan.id}", step_id=step_id, rationale=rationale,
            confidence=confidence, idempotency_key=idempotency_key, timeout_minutes=1,
            created_at=created, expires_at=created + timedelta(minutes=1), snapshot=live,
            proposal_hash="", plan_id=plan.id, bench=self.config.bench)
        req.proposal_hash = proposal_hash(inst.config.name,
                                          [a.canonical for a in req.actions], live,
                                          request=req.id)
        by = f"plan {plan.id} (approved by {', '.join(plan.approved_by)})"
        req.approvals = [Approval(kind=k, by=by, proposal_hash=req.proposal_hash,
                                  people=list(plan.approved_by), tokens=list(plan.tokens))
                         for k in required]
        req.handoff = {"command": message, "plan": plan.id, "auto_step": True,
                       "actions": [a.model_dump(mode="json") for a in req.actions]}
        events = [*unjournaled]
        unjournaled.clear()
        events.append(Event(run_id=run.id, request_id=req.id, type=EventType.APPROVAL_GRANTED,
                            data={"kinds": [k.value for k in required], "by": by,
                                  "plan_id": plan.id, "writes_left": plan.writes_left,
                                  "proposal_hash": req.proposal_hash}))
        # The record first: the approved request is the commit that runs it (the sweeper
        # runs any it finds), never one a 503 told its requester was not kept.
        self.store.kv_put("auto_steps", req.id, {
            "run_id": run.id, "step_id": step_id, "effect": ",".join(
                k.value for k in required), "outcome": None})
        stored = self.store.create_request(req, events)
        if stored.id != req.id:
            self.store.kv_delete("auto_steps", req.id)
            return stored
        return await self.executor.execute(req.id)


    def on_move(self, req: TakeoverRequest, dst: Status) -> None:
        """A plan request that ends any way but executed (denied, expired, cancelled,
        failed, stale) never starts its plan. A step that ends failed or ambiguous (a
        person must check the instrument) ends its plan: nothing more runs unlooked-at."""
        if dst in TERMINAL and dst is not Status.EXECUTED and is_plan_request(req):
            assert req.plan_id is not None
            self.close(req.plan_id, PlanEvent.DENY)
        elif dst in (Status.FAILED, Status.AMBIGUOUS) and req.plan_id is not None and \
                req.handoff.get("auto_step"):
            plan = self.get(req.plan_id)
            if PLANS.target(plan.status, PlanEvent.REVOKE) is not None:
                self._end(plan, f"the gateway: its step {req.id} ended {dst.value}", req.id)

    def stand_down(self, names: list[str], who: Principal) -> set[str]:
        """An emergency stop of ``names`` (this bench's) ends every plan on them, pending or
        active: an approval in force, cancelled like an approved request, or it would run
        on once the stop is cleared. Returns the runs whose plans ended."""
        return {plan.run_id for name in names
                for plan in self._end_over(name, None, f"the emergency stop ({who.name})",
                                           stop=True)}

    def made_safe(self, instrument: str, channels: list[int],
                  why: str = "an envelope breach") -> None:
        """The gateway gave ``channels`` the safe action (a breach read back or found by the
        watch, a lost client's lease): the plans over them end; a person looks first."""
        chs = ", ".join(f"CH{c}" for c in channels)
        self._end_over(instrument, set(channels), f"the gateway: {instrument} {chs} made safe "
                       f"({why})")

    def _end_over(self, instrument: str, channels: set[int] | None, by: str,
                  stop: bool = False) -> list[Plan]:
        """End every plan not over yet on this bench's ``instrument`` (on ``channels``)."""
        ended = [plan for plan in map(Plan.model_validate, self.store.kv_list("plans"))
                 if PLANS.target(plan.status, PlanEvent.REVOKE) is not None
                 and self._here(plan, instrument)
                 and (channels is None or channels & set(plan.scope.channels))]
        for plan in ended:
            self._end(plan, by, stop=stop)
        return ended

    def on_run_closed(self, run_id: str) -> None:
        """A closed run's standing approval ends with it, journaled as any plan's end."""
        for plan in self.plans_of(run_id):
            if PLANS.target(plan.status, PlanEvent.REVOKE) is not None:
                self._end(plan, "the run was closed")
        self._locks.pop(run_id, None)
