"""The gateway core: the one façade every door calls.

door → scpi.classify → policy.decide → pass (lane read) | refuse | hold (takeover request)
→ approvals → executor (live recheck, canonical write, read back, receipt).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from pydantic import ValidationError

from . import envelope
from .approvals import Grant, person, violation
from .auth import carries_token, redact, refuse_token
from .confidence import apply_env, score, stated_confidence, threshold_for
from .config import BenchConfig, InstrumentConfig
from .errors import (
    GatewayError,
    IdempotencyKeyReused,
    InstrumentError,
    InvalidInput,
    NotFound,
    PermissionDenied,
    ProposalChanged,
    Refused,
    TransitionError,
)
from .federation import Registry, Rules
from .handoff import build_handoff, describe, snapshot_key
from .instruments import AsyncLink, Lane, Link, open_link
from .journal import ReadJournal
from .models import (
    Action,
    Approval,
    ApprovalKind,
    Event,
    EventType,
    Principal,
    Receipt,
    Role,
    Run,
    RunKind,
    RunStatus,
    Snapshot,
    Status,
    TakeoverRequest,
    now,
    proposal_hash,
)
from .plans import Plan, PlanScope, PlanStatus, covers, scope_words
from .policy import Verdict, approval_for, decide, envelope_breach, required_for, unpredictable
from .questions import QuestionDesk
from .readback import Judgement, judge_readback
from .readback import Verdict as Judged
from .scpi import (
    Classification,
    Effect,
    Profile,
    ProfileError,
    ScpiError,
    Unit,
    classify,
    format_number,
    get_profile,
    lex,
    render_value,
)
from .states import TERMINAL, target
from .states import Event as Move
from .store import Store

__all__ = ["Gateway", "GrantResult", "SubmitResult"]

MAX_RETRIES = 8
#: The channel-name form of the selection query (``INST:SEL?`` answers ``CH2``).
SELECT_NAME_QUERY = "INST:SEL?"
SWEEP_SECONDS = 0.5
#: Runs remembered with their owner; past this the memory starts over.
RUNS_REMEMBERED = 100_000
#: The fields of a channel's setpoint: what an approved setpoint remembers.
SETPOINT_FIELDS = ("voltage", "current")
#: How long a restart waits for an interrupted write to finish inside the instrument.
SETTLE_SECONDS = 30.0
#: The store's table of runs that live and die with one connection (socket door, MCP).
ATTACHED = "attached_runs"


@dataclass(slots=True)
class SubmitResult:
    """What a requester gets back from :meth:`Gateway.submit`."""

    status: str  # "executed" | "pending" | "refused" | a terminal status of its request
    response: str | None = None
    request: TakeoverRequest | None = None
    code: int = 0
    reason: str = ""


@dataclass(slots=True)
class GrantResult:
    request: TakeoverRequest
    missing: list[ApprovalKind] = field(default_factory=list)
    message: str = ""


@dataclass(slots=True)
class _Safed:
    """The safe action taken after a read-back found the envelope breached."""

    found: list[envelope.Breach]
    sent: list[str]
    after: dict[str, str] | None = None
    error: str | None = None


@dataclass(slots=True)
class _Written:
    """What one write's lane turn saw: answers, errors, the read-back, a safe action."""

    answers: dict[int, str] = field(default_factory=dict)
    error: str | None = None
    after: dict[str, str] | None = None
    read_error: str | None = None
    instrument_errors: list[str] = field(default_factory=list)
    safed: _Safed | None = None


@dataclass(slots=True)
class Instrument:
    config: InstrumentConfig
    profile: Profile
    lane: Lane


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


def _normalize(profile: Profile, fld: str, raw: str, where: str = "") -> str:
    """An instrument's answer as a comparable canonical value (``+5.0E+00`` -> ``5.0``).
    A numeric field that answers no number (garbled, empty) is an I/O failure, never a value."""
    spec = profile.fields.get(fld)
    text = raw.strip().strip('"')
    if spec is None or spec.type == "text":
        return text
    try:
        number = Decimal(text)
    except InvalidOperation:
        number = Decimal("NaN")
    if not number.is_finite():
        raise InstrumentError(f"{where or fld}: answer {raw!r} is not a number")
    if spec.type == "boolean":
        return "1" if number != 0 else "0"
    return format_number(number)


def _unverifiable(actions: list[Action]) -> list[str]:
    """The commands whose effect no read-back can confirm (``*RST``, unknown commands...)."""
    return [a.canonical for a in actions
            if a.effect not in ("read", "select", "harmless")
            and (a.field is None or a.new is None)]


def _door_only(message: str, rationale: str | None) -> tuple[int, str] | None:
    """Refuse what must never be journaled or reach an instrument: a token, or the socket
    door's own GATE commands sent through another door."""
    if carries_token(message) or carries_token(rationale):
        return (-203, "the message carries a bench-gate token; a token is never journaled "
                      "or sent to an instrument: present it in the Authorization header "
                      "(HTTP) or with GATE:TOK on the socket door")
    try:
        units = lex(message)
    except ScpiError:
        return None  # the classifier reports the syntax error
    if any(not u.common and u.mnemonics[0] == "GATE" for u in units):
        return (-113, "GATE commands belong to the socket door; they are never sent to an "
                      "instrument")
    return None


def _join(units: list[Unit], answers: dict[int, str]) -> str:
    """IEEE 488.2 §8.4.1: ',' joins the parts of one unit's answer, ';' joins units."""
    groups: dict[int, list[str]] = {}
    for i, unit in enumerate(units):
        if i in answers:
            groups.setdefault(unit.source, []).append(answers[i])
    return ";".join(",".join(parts) for parts in groups.values())


class Gateway:
    """The gateway core. Create it, ``await start()``, use it, ``await close()``."""

    def __init__(self, config: BenchConfig, store: Store,
                 links: dict[str, Link | AsyncLink] | None = None,
                 clock: Callable[[], Any] = now) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.instruments: dict[str, Instrument] = {}
        for ic in config.instruments:
            link = (links or {}).get(ic.name) or open_link(ic)
            self.instruments[ic.name] = Instrument(ic, get_profile(ic.profile), Lane(ic.name, link))
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._subscribers: set[asyncio.Queue[dict[str, Any]]] = set()
        self._selected: dict[tuple[str, str], int] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._in_flight: set[str] = set()
        self._reads = ReadJournal(store)
        #: This gateway's claim on its bench name, and the other benches' published rules.
        self.registry = Registry(store, config)
        #: Runs known to exist, and who made each, so a read need not load its run.
        self._owners: dict[str, str] = {}
        #: One execution at a time per instrument, from the recheck to the read-back: the
        #: recheck and the write are two lane jobs, and another write between them would
        #: make the recheck stale. An asyncio lock: a waiting execution holds no thread.
        self._executing: dict[str, asyncio.Lock] = {}
        #: Runs closed through this gateway: a read of a known run checks this, not the store.
        self._closed_runs: set[str] = set()
        #: One plan decision at a time per run: judge, then spend, with nothing between.
        self._plan_locks: dict[str, asyncio.Lock] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unlisten: Callable[[], None] | None = None
        self.metrics: dict[str, float] = {"decisions": 0, "decision_seconds": 0.0}
        #: Questions agents ask the operator (same queue, same expiry, same journal).
        self.questions = QuestionDesk(store, clock=lambda: self.clock(), publish=self._publish,
                                      policy=config.policy)

    @property
    def bench(self) -> str:
        return self.config.bench

    def profile_for(self, req: TakeoverRequest) -> Profile:
        """The profile a request was judged with, also for another bench's request."""
        if self.owns(req):
            return self.instruments[req.instrument].profile
        try:
            return get_profile(str(req.handoff.get("profile") or "generic"))
        except ProfileError:
            return get_profile("generic")

    def _qualified(self, instrument: str) -> str:
        """Instrument names are per bench; the shared store keys them by bench too."""
        return f"{self.config.bench}/{instrument}"

    def owns(self, req: TakeoverRequest) -> bool:
        """Only the gateway whose bench owns the instrument ever executes a request."""
        return req.bench in ("", self.config.bench) and req.instrument in self.instruments

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Recover from the store, then run the one expiry sweeper."""
        self._loop = asyncio.get_running_loop()
        self.registry.claim()
        self._close_gone_clients()
        await self.sweep()
        for req in self.store.list_requests(status=Status.EXECUTING, limit=10_000):
            if self.owns(req):
                await self._reconcile_interrupted(req)
        await self._run_approved()
        # Other gateways on a shared store tell us of changes (PostgreSQL LISTEN/NOTIFY).
        self._unlisten = self.store.listen(self._on_remote)
        self._sweeper = asyncio.create_task(self._sweep_forever())

    async def _run_approved(self) -> None:
        """Execute approved requests this bench owns that nobody is executing: after a
        restart, and as the fallback when a notification from another gateway was lost."""
        for req in self.store.list_requests(status=Status.APPROVED, limit=10_000):
            if self.owns(req) and req.id not in self._in_flight:
                self._spawn(self._execute(req.id))

    def _on_remote(self, message: dict[str, Any]) -> None:
        """A change made by another gateway (called from the store's listener thread)."""
        loop = self._loop
        if loop is None or loop.is_closed() or message.get("origin") == id(self):
            return
        loop.call_soon_threadsafe(self._remote_change, message)

    def _remote_change(self, message: dict[str, Any]) -> None:
        request_id = str(message.get("id", ""))
        self._wake(request_id)
        self._publish(str(message.get("type", "request")), **{
            k: v for k, v in message.items() if k not in ("type", "origin")})
        if message.get("status") == Status.APPROVED.value and \
                message.get("bench") == self.config.bench and request_id not in self._in_flight:
            self._spawn(self._execute(request_id))

    async def close(self) -> None:
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for task in list(self._tasks):
            with contextlib.suppress(Exception):
                await task
        await self._reads.close()
        for inst in self.instruments.values():
            await inst.lane.close()
        self.registry.release()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            with contextlib.suppress(GatewayError):
                self.registry.beat()
                await self.sweep()
                await self._run_approved()

    async def sweep(self) -> int:
        """Expire every pending request whose time is up (an expiry is a denial)."""
        count = 0
        for req in self.store.due_for_expiry(self.clock().isoformat()):
            if self._move(req, Move.EXPIRE, EventType.TAKEOVER_EXPIRED,
                          {"expires_at": req.expires_at.isoformat()},
                          outcome="expired: no decision before "
                                  f"{req.expires_at.isoformat()}; nothing was written"):
                count += 1
                self._after_denial(req, "expired")
        self.questions.sweep()
        return count

    # ------------------------------------------------------------------ events
    def _publish(self, kind: str, **data: Any) -> None:
        message = {"type": kind, **data}
        for queue in list(self._subscribers):
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(message)

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
        """Changes to requests and runs, for the console, the CLI and SSE."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=1000)
        self._subscribers.add(queue)
        try:
            yield queue
        finally:
            self._subscribers.discard(queue)

    def _wake(self, request_id: str) -> None:
        for event in self._waiters.get(request_id, ()):
            event.set()

    def _notify(self, req: TakeoverRequest) -> None:
        self._wake(req.id)
        message = {"id": req.id, "run_id": req.run_id, "status": req.status.value,
                   "instrument": req.instrument, "bench": req.bench or self.config.bench}
        self._publish("request", **message)
        with contextlib.suppress(GatewayError):  # a lost notification is caught by the sweep
            self.store.notify({"type": "request", "origin": id(self), **message})

    # ------------------------------------------------------------------ runs
    def create_run(self, principal: Principal, kind: RunKind | str,
                   goal: str | None = None, *, attached: str | None = None) -> Run:
        """A new run. ``attached`` names the door of a connection the run lives and dies
        with (``socket``, ``mcp``): after a restart that connection is gone, so is the run."""
        from .quotas import check_runs  # per-requester quota (limits.open_runs)
        check_runs(self, principal)
        try:
            kind = RunKind(kind)
        except ValueError as exc:
            raise InvalidInput(f"run kind must be one of {[k.value for k in RunKind]}, "
                               f"not {kind!r}") from exc
        if kind is RunKind.ENGINEER and principal.role not in (Role.OPERATOR, Role.ADMIN):
            raise PermissionDenied(f"{principal.name} is a {principal.role.value}; engineer "
                                   "runs are for operators at the bench (their own changes, "
                                   "confirmed by themselves): start a script or agent run")
        refuse_token(goal, "goal")
        run = Run(id=_new_id("run"), kind=kind, principal=principal.name, goal=goal)
        self.store.create_run(run, [Event(run_id=run.id, type=EventType.RUN_CREATED,
                                          data={"kind": kind.value, "principal": run.principal,
                                                "goal": goal})])
        if attached is not None:
            self.store.kv_put(ATTACHED, run.id, {"bench": self.config.bench, "door": attached})
        self._remember(run)
        self._publish("run", id=run.id, status=run.status.value)
        return run

    def get_run(self, run_id: str) -> Run:
        run = self.store.get_run(run_id)
        if run is None:
            raise NotFound(f"no run {run_id!r}")
        self._remember(run)
        return run

    def run_owner(self, run_id: str) -> str:
        """Who made the run. Runs are never deleted and never change hands, so once known
        this needs no store read."""
        owner = self._owners.get(run_id)
        return owner if owner is not None else self.get_run(run_id).principal

    def _remember(self, run: Run) -> None:
        if len(self._owners) >= RUNS_REMEMBERED:
            self._owners.clear()
        self._owners[run.id] = run.principal

    def set_goal(self, run_id: str, goal: str) -> Run:
        refuse_token(goal, "goal")
        run = self.get_run(run_id)
        run.goal = goal
        self.store.save_run(run, [Event(run_id=run.id, type=EventType.GOAL_SET,
                                        data={"goal": goal})])
        return run

    def take_over(self, run_id: str, operator: Principal, reason: str) -> Run:
        self._require_operator(operator)
        refuse_token(reason, "reason")
        run = self.get_run(run_id)
        if run.status is RunStatus.CLOSED:
            raise TransitionError(run_id, run.status.value, "take over", "the run is closed")
        run.status = RunStatus.TAKEN_OVER
        run.takeover_reason = reason
        run.takeover_by = operator.name
        self.store.save_run(run, [Event(run_id=run_id, type=EventType.RUN_TAKEN_OVER,
                                        data={"by": operator.name, "reason": reason})])
        self._publish("run", id=run.id, status=run.status.value)
        return run

    def release(self, run_id: str, operator: Principal) -> Run:
        """End an operator's takeover or a suspension; the run's writes go on."""
        self._require_operator(operator)
        run = self.get_run(run_id)
        if run.status not in (RunStatus.TAKEN_OVER, RunStatus.SUSPENDED):
            raise TransitionError(run_id, run.status.value, "release",
                                  "only a taken-over or suspended run can be released")
        run.status = RunStatus.ACTIVE
        run.takeover_reason = run.takeover_by = None
        self.store.save_run(run, [Event(run_id=run_id, type=EventType.TAKEOVER_RELEASED,
                                        data={"by": operator.name})])
        self._publish("run", id=run.id, status=run.status.value)
        return run

    def close_run(self, run_id: str, reason: str = "the requester disconnected") -> None:
        """The requester is gone: cancel its undecided and approved-but-unstarted requests,
        never run them for nobody."""
        run = self.get_run(run_id)
        for status in (Status.PENDING, Status.APPROVED):
            for req in self.store.list_requests(status=status, run_id=run_id, limit=10_000):
                self._move(req, Move.CANCEL, EventType.TAKEOVER_CANCELLED,
                           {"reason": reason},
                           outcome=f"cancelled: {reason}; nothing was written")
        self.questions.cancel_run(run_id)
        for plan in self._plans_of(run_id):  # a closed run's standing approval ends with it
            if plan.status in (PlanStatus.PENDING, PlanStatus.ACTIVE):
                plan.status = PlanStatus.REVOKED
                plan.revoked_by = "the run was closed"
                self._save_plan(plan)
        run.status = RunStatus.CLOSED
        self._closed_runs.add(run_id)
        self.store.save_run(run, [])
        self.store.kv_delete(ATTACHED, run_id)
        self._plan_locks.pop(run_id, None)
        self._plan_locks.pop(run_id, None)

    def _close_gone_clients(self) -> None:
        """At start: every run attached to a connection of this bench's previous process
        lost its client with that process. Its requests must never run."""
        for run_id, data in self.store.kv_items(ATTACHED):
            if data.get("bench") != self.config.bench:
                continue
            try:
                self.close_run(run_id, "client gone: its connection ended with a restart")
            except NotFound:
                self.store.kv_delete(ATTACHED, run_id)

    # ------------------------------------------------------------------ submit
    def instrument(self, name: str) -> Instrument:
        inst = self.instruments.get(name)
        if inst is None:
            raise NotFound(f"no instrument {name!r}; this bench has "
                           f"{', '.join(self.instruments) or 'none'}")
        return inst

    async def _classify(self, run_id: str, inst: Instrument, message: str) -> Classification:
        key = (run_id, inst.config.name)
        selected = self._selected.get(key)
        c = classify(message, inst.profile.name, selected=selected)
        needs_channel = any(
            u.channel is None and u.field is not None and inst.profile.channels
            for u in c.units
        )
        if needs_channel and selected is None and inst.profile.model.select_query:
            answer = await inst.lane.run(lambda link: link.query(
                str(inst.profile.model.select_query)), whole=False)
            try:
                selected = int(Decimal(answer))
            except InvalidOperation as exc:
                raise InstrumentError(f"{inst.config.name}: bad selection answer "
                                      f"{answer!r}") from exc
            c = classify(message, inst.profile.name, selected=selected)
        if c.selected is not None:
            self._selected[key] = c.selected
        return c

    async def submit(self, run_id: str, instrument: str, message: str, *,
                     rationale: str | None = None, confidence: float | None = None,
                     step_id: str | None = None, idempotency_key: str | None = None,
                     timeout_minutes: int | None = None) -> SubmitResult:
        # A known run exists (runs are never deleted): it is read only if a write needs it.
        run = None if run_id in self._owners else self.get_run(run_id)
        inst = self.instrument(instrument)
        asked = (instrument, message, rationale, confidence, step_id, timeout_minutes)
        if idempotency_key is not None:
            earlier = self.store.find_request(run_id, idempotency_key)
            if earlier is not None:
                self._same_request(earlier, idempotency_key, *asked)
                return self._result(earlier)
        if confidence is not None and not 0 <= confidence <= 1:
            raise InvalidInput(f"confidence must be between 0 and 1, not {confidence}")
        refuse_token(step_id, "step_id")
        stated_confidence(rationale)  # a "Confidence: 9500%" is refused, never clamped
        timeout = self._timeout(timeout_minutes)
        refusal = _door_only(message, rationale)
        if refusal is not None:
            code, reason = refusal
            self.store.append([
                Event(run_id=run_id, type=EventType.COMMAND_RECEIVED,
                      data={"instrument": instrument, "message": redact(message),
                            "rationale": redact(rationale), "step_id": step_id}),
                Event(run_id=run_id, type=EventType.WRITE_REFUSED,
                      data={"message": redact(message), "code": code, "reason": reason})])
            return SubmitResult("refused", code=code, reason=reason)
        received = Event(run_id=run_id, type=EventType.COMMAND_RECEIVED,
                         data={"instrument": instrument, "message": message,
                               "rationale": rationale, "confidence": confidence,
                               "step_id": step_id})
        selected_before = self._selected.get((run_id, inst.config.name))
        try:
            c = await self._classify(run_id, inst, message)
        except ScpiError as exc:
            self.store.append([received, Event(
                run_id=run_id, type=EventType.WRITE_REFUSED,
                data={"message": message, "code": exc.code, "reason": exc.message})])
            return SubmitResult("refused", code=exc.code, reason=exc.message)
        limits = self.config.envelope.get(instrument, {})
        decision = decide(c, limits, self.config.policy)
        if decision.verdict is Verdict.REFUSE:
            self.store.append([received, Event(
                run_id=run_id, type=EventType.WRITE_REFUSED,
                data={"message": message, "code": decision.code, "reason": decision.reason})])
            return SubmitResult("refused", code=decision.code, reason=decision.reason)
        if run is None and (not c.read_only or decision.verdict is not Verdict.PASS
                            or run_id in self._closed_runs):
            run = self.get_run(run_id)  # fresh: a takeover or suspension decides a write
        if run is not None and run.status is RunStatus.CLOSED:
            reason = "the run is closed: nothing more runs in it; start a new run"
            self.store.append([received, Event(
                run_id=run_id, type=EventType.WRITE_REFUSED,
                data={"message": message, "code": -203, "reason": reason})])
            return SubmitResult("refused", code=-203, reason=reason)
        if run is not None and run.status is RunStatus.SUSPENDED:
            reason = "the run is suspended; an operator must release it"
            if not c.read_only:
                self.store.append([received, Event(
                    run_id=run_id, type=EventType.WRITE_REFUSED,
                    data={"message": message, "code": -203, "reason": reason})])
                return SubmitResult("refused", code=-203, reason=reason)
        held = decision.verdict is Verdict.HOLD or (
            run is not None and run.status is RunStatus.TAKEN_OVER and not c.read_only)
        if not held:
            self._reads.reading += 1
            try:
                try:
                    response = await self._run_units(inst, list(c.units), selected_before,
                                                     read_only=c.read_only)
                except InstrumentError as exc:
                    self.store.append([received, Event(
                        run_id=run_id, type=EventType.STEP_FAILED,
                        data={"message": message, "reason": exc.message})])
                    raise
                executed = [received, Event(
                    run_id=run_id, type=EventType.READ_EXECUTED,
                    data={"message": message, "canonical": list(c.canonical),
                          "response": response})]
                if c.read_only:
                    await self._reads.append(executed)
                else:  # a write that runs unattended (the safe action): fsync'd like any
                    self.store.append(executed)
            finally:
                self._reads.reading -= 1
            return SubmitResult("executed", response=response)
        if run is None:  # pragma: no cover - a held message always loaded its run above
            run = self.get_run(run_id)
        required = list(decision.required) or [ApprovalKind.STATE]
        gate_note: dict[str, Any] | None = None
        unjournaled = [received]
        try:
            if decision.verdict is Verdict.HOLD and run.status is RunStatus.ACTIVE:
                via_plan = await self._try_plan(run, inst, message, c, unjournaled,
                                                rationale=rationale,
                                                confidence=confidence, step_id=step_id,
                                                idempotency_key=idempotency_key)
                if isinstance(via_plan, TakeoverRequest):
                    if idempotency_key is not None:  # a concurrent twin may have won the key
                        self._same_request(via_plan, idempotency_key, *asked)
                    return self._result(via_plan)
                gate_note = via_plan
            req = await self._hold(
                run, inst, message, c, required,
                reason=rationale or f"{run.kind.value} {run.principal} asks to run {message!r}",
                rationale=rationale, confidence=confidence, step_id=step_id,
                idempotency_key=idempotency_key, timeout=timeout, events=unjournaled,
                gate=gate_note)
            if idempotency_key is not None:  # a concurrent twin may have won the key
                self._same_request(req, idempotency_key, *asked)
        except Refused as exc:  # the predicted state leaves the envelope: never held
            self.store.append([*unjournaled, Event(
                run_id=run_id, type=EventType.WRITE_REFUSED,
                data={"message": message, "code": exc.code, "reason": exc.message})])
            return SubmitResult("refused", code=exc.code, reason=exc.message)
        except InstrumentError as exc:
            self.store.append([*unjournaled, Event(
                run_id=run_id, type=EventType.STEP_FAILED,
                data={"message": message, "reason": f"no snapshot: {exc.message}"})])
            raise
        return self._result(req)

    def _same_request(self, earlier: TakeoverRequest, key: str, instrument: str,
                      message: str, rationale: str | None, confidence: float | None,
                      step_id: str | None, timeout_minutes: int | None) -> None:
        """Only an exact retry gets the earlier result; another request under the same key
        is refused. A write run inside a plan has a timeout of its own."""
        planned = bool(earlier.handoff.get("auto_step"))
        minutes = self.config.policy.default_timeout_minutes \
            if timeout_minutes is None else timeout_minutes
        differs = [name for name, was, now_ in (
            ("instrument", earlier.instrument, instrument),
            ("command", earlier.message, message),
            ("rationale", earlier.rationale, rationale),
            ("confidence", earlier.confidence, confidence),
            ("step id", earlier.step_id, step_id),
            ("timeout", None if planned else earlier.timeout_minutes,
             None if planned else minutes)) if was != now_]
        if differs:
            raise IdempotencyKeyReused(key, earlier.id, differs)

    def _timeout(self, minutes: int | None) -> int:
        policy = self.config.policy
        value = policy.default_timeout_minutes if minutes is None else minutes
        if not 1 <= value <= policy.max_timeout_minutes:
            raise InvalidInput(f"timeoutMinutes must be 1 to {policy.max_timeout_minutes}, "
                               f"not {value}")
        return value

    def _result(self, req: TakeoverRequest) -> SubmitResult:
        response = req.receipt.detail if req.receipt is not None else None
        reason = req.outcome or ""
        return SubmitResult(req.status.value, response=response or None, request=req,
                            code=0 if req.status in (Status.EXECUTED, Status.PENDING,
                                                     Status.APPROVED, Status.EXECUTING)
                            else -203, reason=reason)

    async def _run_units(self, inst: Instrument, units: list[Unit],
                         selected: int | None = None, *, read_only: bool = False) -> str:
        """Send canonical units in order on the lane; selections are per run, never sent,
        so a selection query is answered from the run's selection, not the instrument's."""
        nsel = inst.profile.model.select_query

        async def job(link: AsyncLink) -> dict[int, str]:
            current = selected
            answers: dict[int, str] = {}
            for i, unit in enumerate(units):
                if unit.effect is Effect.SELECT:
                    if unit.channel is not None:
                        current = unit.channel
                    continue
                if unit.local:  # *CLS: the instrument's status is every client's; the
                    continue    # door clears its own connection's view (IEEE 488.2 §10.3)
                if unit.query and current is not None and nsel and unit.canonical in (
                        nsel, SELECT_NAME_QUERY):
                    answers[i] = str(current) if unit.canonical == nsel else f"CH{current}"
                    continue
                if unit.query:
                    answers[i] = await link.query(unit.canonical)
                else:
                    await link.write(unit.canonical)
            return answers
        return _join(units, await inst.lane.run(job, whole=not read_only))

    # ------------------------------------------------------------------ snapshots
    def _fields(self, inst: Instrument, actions: list[Action]) -> list[tuple[int | None, str]]:
        """Every field the actions depend on; a channel's whole state, or the instrument's."""
        profile = inst.profile
        state_fields = [f for f, spec in profile.fields.items() if not spec.measured]
        channels: set[int | None] = set()
        everything = False
        for a in actions:
            if a.effect in ("read", "select", "harmless"):
                continue
            if a.channel is None:
                everything = True
            channels.add(a.channel)
        if everything:
            channels = set(profile.channels) or {None}
        return [(ch, f) for ch in sorted(channels, key=lambda c: c or 0) for f in state_fields]

    @staticmethod
    async def _read_state(link: AsyncLink, inst: Instrument,
                          fields: list[tuple[int | None, str]]) -> Snapshot:
        """``*IDN?`` and every field, read live on the lane (fresh queries, no cache)."""
        profile = inst.profile
        idn = await link.query("*IDN?")
        values = {}
        for ch, f in fields:
            query = profile.field_query(f, ch)
            values[snapshot_key(ch, f)] = _normalize(profile, f, await link.query(query),
                                                     f"{inst.config.name}: {query!r}")
        return Snapshot(idn=idn, values=values)

    async def _snapshot(self, inst: Instrument, fields: list[tuple[int | None, str]]
                        ) -> Snapshot:
        return await inst.lane.run(lambda link: self._read_state(link, inst, fields))

    def _actions(self, inst: Instrument, c: Classification, snap: Snapshot | None
                 ) -> list[Action]:
        actions = []
        for i, u in enumerate(c.units):
            old = None
            if snap is not None and u.field is not None:
                old = snap.values.get(snapshot_key(u.channel, u.field))
            action = Action(
                index=i, source=u.source, text=u.text, effect=u.effect.value, channel=u.channel,
                field=u.field, old=old,
                new=render_value(u.value) if u.value is not None else None,
                canonical=u.canonical, approval=approval_for(u, self.config.policy),
                unpredictable=u.writes and unpredictable(u.effect, u.value))
            action.words = describe(inst.profile, action)
            actions.append(action)
        return actions

    @staticmethod
    def _proposed(actions: list[Action], snap: Snapshot) -> dict[str, str]:
        state = dict(snap.values)
        for a in actions:
            if a.field is not None and a.new is not None:
                state[snapshot_key(a.channel, a.field)] = a.new
        return state

    def _energize_needs_setpoint(self, inst: Instrument, actions: list[Action],
                                 snap: Snapshot) -> list[int]:
        """Channels turned on here with no approved setpoint matching the live one."""
        missing = []
        for a in actions:
            if a.approval is not ApprovalKind.OUTPUT_ENABLE or a.channel is None:
                continue
            if any(b.approval is ApprovalKind.SETPOINT and b.channel == a.channel
                   for b in actions):
                continue
            if not self._setpoint_still_approved(inst, a.channel, snap):
                missing.append(a.channel)
        return missing

    def _setpoint_still_approved(self, inst: Instrument, channel: int, snap: Snapshot) -> bool:
        stored = self.store.get_setpoint(self._qualified(inst.config.name), channel)
        if stored is None:
            return False
        return all(snap.values.get(snapshot_key(channel, f)) == stored.get(f)
                   for f in ("voltage", "current"))

    def _check_envelope(self, inst: Instrument, actions: list[Action], snap: Snapshot) -> None:
        """Invariant 4 before anything is sent, on every channel the write names: the state
        it ends in (the live snapshot plus every action) keeps each energized channel inside
        the envelope, the fields the write does not touch included; and no state it passes
        through on the way (units run in the order they are sent) is outside where the one
        before was not. ``OUTP ON`` before the ``VOLT`` that would make it safe is refused.
        Commands whose effect cannot be predicted are judged by the read-back after them.
        Raises Refused (-222) naming the field."""
        limits = self.config.envelope.get(inst.config.name, {})
        over = envelope.action_breaches(inst.profile, limits, actions)
        if over:  # a value above its limit, energized or not
            raise Refused(-222, f"{envelope.summary(inst.profile, over)}; nothing was sent")
        named = {a.channel for a in actions if a.channel is not None and not a.unpredictable
                 and a.effect in ("setpoint", "output", "protection")}
        if not named:
            return
        profile = inst.profile
        before = {(b.channel, b.field): b for b in envelope.breaches(
            profile, limits, snap.values, named)}
        for done in range(1, len(actions) + 1):
            found = envelope.breaches(profile, limits, self._proposed(actions[:done], snap),
                                      named)
            final = done == len(actions)
            worse = [b for b in found if not envelope.no_worse(b, before.get(
                (b.channel, b.field)))]
            if final and found:
                raise Refused(-222, "outside the envelope once this runs: "
                              f"{envelope.summary(profile, found)}; nothing was sent")
            if worse:
                raise Refused(-222, f"outside the envelope after {actions[done - 1].canonical}: "
                              f"{envelope.summary(profile, worse)}; nothing was sent (units run "
                              "in the order they are sent: make the state safe first)")
            before = {(b.channel, b.field): b for b in found}

    # ------------------------------------------------------------------ hold
    async def _hold(self, run: Run, inst: Instrument, message: str, c: Classification,
                    required: list[ApprovalKind], *, reason: str, rationale: str | None,
                    confidence: float | None, step_id: str | None,
                    idempotency_key: str | None, timeout: int, events: list[Event],
                    supersedes: TakeoverRequest | None = None,
                    stale_diff: dict[str, tuple[str | None, str | None]] | None = None,
                    gate: dict[str, Any] | None = None,
                    ) -> TakeoverRequest:
        from .quotas import check_pending  # limits.pending_requests, before the snapshot;
        if supersedes is None:             # a stale request's replacement is no new filing
            check_pending(self, run)
        preliminary = self._actions(inst, c, None)
        snap = await self._snapshot(inst, self._fields(inst, preliminary))
        actions = self._actions(inst, c, snap)
        self._check_envelope(inst, actions, snap)
        energize = self._energize_needs_setpoint(inst, actions, snap)
        if energize and ApprovalKind.SETPOINT not in required:
            required = [ApprovalKind.SETPOINT, *required]
        created = self.clock()
        req = TakeoverRequest(
            id=_new_id("tk"), run_id=run.id, instrument=inst.config.name, message=message,
            actions=actions, required=required, reason=reason, step_id=step_id,
            rationale=rationale, confidence=confidence, idempotency_key=idempotency_key,
            timeout_minutes=timeout, created_at=created,
            expires_at=created + timedelta(minutes=timeout), snapshot=snap,
            proposal_hash=proposal_hash(inst.config.name, [a.canonical for a in actions], snap),
            supersedes=supersedes.id if supersedes is not None else None,
            bench=self.config.bench)
        history = self.store.recent(run.id, limit=40)
        req.handoff = build_handoff(req, run, inst.profile,
                                    self.config.envelope.get(inst.config.name, {}), history,
                                    self._proposed(actions, snap), stale_diff)
        if gate is not None:
            req.handoff["confidence_gate"] = gate
            req.handoff["risk"]["signals"].insert(0, gate["reason"])
        if energize:
            req.handoff["setpoint_needed"] = [
                {"channel": ch, "voltage": snap.values.get(snapshot_key(ch, "voltage")),
                 "current": snap.values.get(snapshot_key(ch, "current"))} for ch in energize]
        events = [*events, Event(run_id=run.id, request_id=req.id,
                                 type=EventType.TAKEOVER_REQUESTED, data=req.handoff)]
        stored = self.store.create_request(req, events)
        self._notify(stored)
        return stored

    # ------------------------------------------------------------------ decisions
    def get_request(self, request_id: str) -> TakeoverRequest:
        req = self.store.get_request(request_id)
        if req is None:
            raise NotFound(f"no takeover request {request_id!r}")
        return req

    def list_requests(self, status: Status | None = None, run_id: str | None = None,
                      instrument: str | None = None, limit: int = 100, offset: int = 0,
                      sort: str = "newest", requester: str | None = None
                      ) -> list[TakeoverRequest]:
        """One page, sorted in the store (``newest``, or ``expiry``: soonest first). It is
        a ``store.RequestPage``: a list that also carries ``total``, how many match."""
        return self.store.page_requests(status, run_id, instrument, limit, offset, sort,
                                        requester)

    @staticmethod
    def _require_operator(who: Principal) -> None:
        if who.role not in (Role.OPERATOR, Role.ADMIN):
            raise PermissionDenied(f"{who.name} is a {who.role.value}; deciding needs an "
                                   "operator")

    def _move(self, req: TakeoverRequest, move: Move, event: EventType,
              data: dict[str, Any], *, outcome: str | None = None,
              notes: str | None = None) -> bool:
        """One conditional transition with its journal event; False if it lost a race."""
        for _ in range(MAX_RETRIES):
            dst = target(req.status, move)
            if dst is None:
                return False
            version = req.version
            req.status = dst
            if outcome is not None:
                req.outcome = outcome
            if notes is not None:
                req.notes = notes
            if dst in TERMINAL and req.decided_at is None:
                req.decided_at = self.clock()
            extra = {"plan_id": req.plan_id} if req.plan_id else {}
            ev = Event(run_id=req.run_id, request_id=req.id, type=event,
                       data={**data, "status": dst.value, **extra})
            if self.store.save_request(req, version, [ev]):
                self._notify(req)
                self._after_move(req, dst)
                return True
            fresh = self.store.get_request(req.id)
            if fresh is None:
                return False
            req.__dict__.update(fresh.__dict__)
        return False

    def _check_approver(self, req: TakeoverRequest, run: Run, who: Principal,
                        kinds: list[ApprovalKind]) -> None:
        self._require_operator(who)
        grants = [Grant(a.kind, a.by) for a in req.valid_approvals()] + [
            Grant(k, who.name) for k in kinds]
        why = violation(req, run, self._rules(req)[0], grants, self._remembered_people(req))
        if why is not None:
            raise PermissionDenied(why)
        if person(who.name) == person(run.principal) and len(kinds) != 1:
            raise InvalidInput("approving your own change confirms one approval kind at "
                               "a time: confirm setpoint and output enable separately")

    def _rules(self, req: TakeoverRequest) -> Rules:
        """The policy and envelope a request is decided by: its owner's, published through
        the shared store when another bench owns it (the owner checks them again anyway)."""
        if not self.owns(req):
            published = self.registry.rules(req.bench)
            if published is not None:
                return published
        return self.config.policy, self.config.envelope

    def _remembered_people(self, req: TakeoverRequest) -> dict[int, list[str]]:
        """For each channel this request switches on: who approved the setpoint fields in
        force there that the request does not set itself. A remembered setpoint is in force
        only while it equals the state the request was judged on."""
        out: dict[int, list[str]] = {}
        key = f"{req.bench or self.config.bench}/{req.instrument}"
        snap = req.snapshot.values
        for a in req.actions:
            if a.approval is not ApprovalKind.OUTPUT_ENABLE or a.channel is None:
                continue
            ch = a.channel
            stored = self.store.get_setpoint(key, ch) or {}
            if any(stored.get(f) != snap.get(snapshot_key(ch, f)) for f in SETPOINT_FIELDS):
                continue  # not in force: the request needs (and shows) its own setpoint
            mine = {b.field for b in req.actions if b.channel == ch and b.effect == "setpoint"}
            by_field = stored.get("by_field") or {}
            people = {str(p) for f in SETPOINT_FIELDS if f not in mine
                      for p in (by_field.get(f) or stored.get("people")
                                or ([stored["by"]] if stored.get("by") else []))}
            out[ch] = sorted(people)
        return out

    def _policy_refusal(self, req: TakeoverRequest) -> str | None:
        """The owner's own rules, checked again just before it executes: a decision made on
        another gateway, or before a restart or a config change, never skips them."""
        if req.plan_id is not None and req.handoff.get("auto_step"):
            return None  # its plan was approved under these rules; covers() bounds it
        run = self.get_run(req.run_id)
        grants = [Grant(a.kind, a.by) for a in req.valid_approvals()]
        why = violation(req, run, self.config.policy, grants, self._remembered_people(req))
        if why is None:
            inst = self.instrument(req.instrument)
            limits = self.config.envelope.get(req.instrument, {})
            found = envelope.action_breaches(inst.profile, limits, req.actions)
            why = envelope.summary(inst.profile, found) if found else None
        return f"this bench's rules refuse it now: {why}" if why else None

    def _missing_message(self, req: TakeoverRequest) -> str:
        missing = req.missing()
        if not missing:
            return ""
        blind = [a.canonical for a in req.actions if a.unpredictable]
        if blind:
            return (f"still needs approval: {', '.join(k.value for k in missing)} (the gateway "
                    f"cannot predict what {', '.join(blind)} does to setpoints and outputs, "
                    "so it needs every approval)")
        channels = [a.channel for a in req.actions if a.approval is ApprovalKind.OUTPUT_ENABLE]
        chs = ", ".join(f"CH{c}" for c in channels)
        have = req.approved_kinds()
        if ApprovalKind.SETPOINT in missing and ApprovalKind.OUTPUT_ENABLE in have:
            return (f"{chs} output enable approved, but no approved setpoint for {chs}: "
                    "approve a setpoint first")
        if ApprovalKind.OUTPUT_ENABLE in missing and ApprovalKind.SETPOINT in have:
            return (f"setpoint approved; the output enable of {chs} still needs its own "
                    "approval")
        return "still needs approval: " + ", ".join(k.value for k in missing)

    async def grant(self, request_id: str, approver: Principal,
                    kinds: list[ApprovalKind | str], notes: str = "",
                    edits: dict[str, str] | None = None, *, proposal_hash: str
                    ) -> GrantResult:
        """Approve some kinds of exactly the proposal ``proposal_hash`` names (the one the
        approver was shown); when none is missing, execute (recheck, write, read back).
        A hash that is not the current one raises ProposalChanged and records nothing."""
        try:
            wanted = [ApprovalKind(k) for k in kinds]
        except ValueError as exc:
            raise InvalidInput(f"approval kinds are {[k.value for k in ApprovalKind]}: "
                               f"{exc}") from exc
        if not wanted:
            raise InvalidInput("say which approvals you give: setpoint, output_enable, state")
        refuse_token(notes, "notes")
        seen = proposal_hash  # the proposal this approver is deciding on
        for _ in range(MAX_RETRIES):
            req = self.get_request(request_id)
            run = self.get_run(req.run_id)
            if req.status is Status.PENDING and req.expires_at <= self.clock():
                await self.sweep()
                req = self.get_request(request_id)
            if req.status is not Status.PENDING:
                raise TransitionError(req.id, req.status.value, "grant")
            if req.proposal_hash != seen:
                # Never bind an approval to a proposal its approver has not seen: an edit
                # by someone else, or a fresh proposal, needs a fresh look.
                raise ProposalChanged(req.id, req.status.value, "grant", seen,
                                      req.proposal_hash)
            unknown = [k.value for k in wanted if k not in req.required]
            if unknown:
                raise InvalidInput(f"{req.id} does not need {', '.join(unknown)} approval; it "
                                   f"needs {', '.join(k.value for k in req.required)}")
            self._check_approver(req, run, approver, wanted)
            version = req.version
            events: list[Event] = []
            if edits:
                events.extend(self._apply_edits(req, edits, approver))
            for kind in wanted:
                if kind in req.approved_kinds():
                    continue
                req.approvals.append(Approval(kind=kind, by=approver.name, notes=notes,
                                              proposal_hash=req.proposal_hash))
                events.append(Event(run_id=req.run_id, request_id=req.id,
                                    type=EventType.APPROVAL_GRANTED,
                                    data={"kind": kind.value, "by": approver.name,
                                          "notes": notes, "proposal_hash": req.proposal_hash}))
            complete = not req.missing()
            if complete:
                req.status = Status.APPROVED
            if self.store.save_request(req, version, events):
                break
        else:
            raise TransitionError(request_id, "busy", "grant", "too many concurrent changes")
        self._notify(req)
        if not complete:
            return GrantResult(req, req.missing(), self._missing_message(req))
        self._record_decision(req)
        if not self.owns(req):
            # Another bench owns the instrument: it rechecks and executes (told through the
            # store). While it is alive, wait a little for its outcome so the approver sees
            # it; while it is down, the grant is recorded at once and runs when it is back.
            if not self.registry.alive(req.bench):
                return GrantResult(req, [], f"approved; bench {req.bench!r} is not running: it "
                                   "executes it after its live recheck when it is back, if "
                                   "that is before the request expires")
            final = await self.wait(req.id, timeout=5, follow=False)
            message = final.outcome or (f"approved; bench {req.bench!r} executes it after its "
                                        "live recheck")
            return GrantResult(final, [], message)
        final = await self._execute(req.id)
        return GrantResult(final, [], final.outcome or "")

    def _record_decision(self, req: TakeoverRequest) -> None:
        self.metrics["decisions"] += 1
        self.metrics["decision_seconds"] += (self.clock() - req.created_at).total_seconds()

    def _apply_edits(self, req: TakeoverRequest, edits: dict[str, str], who: Principal
                     ) -> list[Event]:
        """Approve with changes: re-render the edited actions; a new proposal, a new hash."""
        profile = self.profile_for(req)
        limits = self._rules(req)[1].get(req.instrument, {})
        old_commands = [a.canonical for a in req.actions]
        old_hash = req.proposal_hash
        for key, raw_value in edits.items():
            channel_text, _, fld = key.partition(".")
            try:
                channel = int(channel_text.upper().removeprefix("CH"))
            except ValueError as exc:
                raise InvalidInput(f"edit {key!r}: write it as CH1.voltage=5") from exc
            targets = [a for a in req.actions if a.channel == channel and a.field == fld
                       and a.new is not None and a.effect == "setpoint"]
            if not targets:
                raise InvalidInput(f"edit {key!r}: this request sets no {fld} on CH{channel}")
            for a in targets:
                head, _, args = a.canonical.partition(" ")
                rest = args.split(",", 1)
                text = f"{head} {raw_value}" + (f",{rest[1]}" if len(rest) > 1 else "")
                try:
                    c = classify(text, profile.name)
                except ScpiError as exc:
                    raise InvalidInput(f"edit {key}={raw_value!r}: {exc.message}") from exc
                if len(c.units) != 1:
                    raise InvalidInput(f"edit {key}={raw_value!r} is not one value")
                unit = c.units[0]
                breach = envelope_breach(unit, limits)
                if breach:
                    raise InvalidInput(f"edit {key}={raw_value!r}: {breach}")
                a.canonical = unit.canonical
                a.new = render_value(unit.value) if unit.value is not None else None
                a.words = describe(profile, a)
        req.proposal_hash = proposal_hash(req.instrument, [a.canonical for a in req.actions],
                                          req.snapshot)
        req.handoff["actions"] = [a.model_dump(mode="json") for a in req.actions]
        req.handoff["proposed"] = self._proposed(req.actions, req.snapshot)
        req.handoff["proposal_hash"] = req.proposal_hash
        return [Event(run_id=req.run_id, request_id=req.id, type=EventType.PROPOSAL_EDITED,
                      data={"by": who.name, "edits": edits, "old_commands": old_commands,
                            "new_commands": [a.canonical for a in req.actions],
                            "old_hash": old_hash, "new_hash": req.proposal_hash})]

    async def deny(self, request_id: str, approver: Principal, notes: str, *,
                   proposal_hash: str) -> TakeoverRequest:
        """Deny exactly the proposal ``proposal_hash`` names (the one the approver saw)."""
        if not notes.strip():
            raise InvalidInput("a denial needs a note: it goes back to the requester")
        refuse_token(notes, "notes")
        req = self.get_request(request_id)
        run = self.get_run(req.run_id)
        self._require_operator(approver)
        if req.status is Status.PENDING and req.proposal_hash != proposal_hash:
            raise ProposalChanged(req.id, req.status.value, "deny", proposal_hash,
                                  req.proposal_hash)
        if approver.name == run.principal and run.kind is not RunKind.ENGINEER:
            raise PermissionDenied(f"{approver.name} made this request; withdraw it with "
                                   "cancel instead")
        if not self._move(req, Move.DENY, EventType.TAKEOVER_DENIED,
                          {"by": approver.name, "notes": notes},
                          outcome=f"denied by {approver.name}: {notes}", notes=notes):
            raise TransitionError(req.id, req.status.value, "deny")
        self._record_decision(req)
        self._after_denial(req, f"denied by {approver.name}")
        return req

    async def cancel(self, request_id: str, who: Principal, reason: str = "withdrawn"
                     ) -> TakeoverRequest:
        req = self.get_request(request_id)
        run = self.get_run(req.run_id)
        if who.name != run.principal and who.role not in (Role.OPERATOR, Role.ADMIN):
            raise PermissionDenied("only the requester or an operator can cancel a request")
        if not self._move(req, Move.CANCEL, EventType.TAKEOVER_CANCELLED,
                          {"by": who.name, "reason": reason},
                          outcome=f"cancelled: {reason}; nothing was written"):
            raise TransitionError(req.id, req.status.value, "cancel")
        return req

    async def wait(self, request_id: str, timeout: float, *, follow: bool = True
                   ) -> TakeoverRequest:
        """Wait for a decision, holding no thread. With ``follow`` (a requester's view) a
        stale request is followed to the fresh one that replaced it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        while True:
            # Registered before reading, so a change between the read and the wait wakes us.
            event, key = asyncio.Event(), request_id
            self._waiters.setdefault(key, set()).add(event)
            try:
                req = self.get_request(request_id)
                if follow and req.status is Status.STALE and req.superseded_by:
                    request_id = req.superseded_by
                    continue
                # A stale request gets its fresh successor a moment after it turns stale.
                if req.status in TERMINAL and (req.status is not Status.STALE or not follow):
                    return req
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return req
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(),
                                           timeout=min(remaining, SWEEP_SECONDS * 2))
            finally:
                waiting = self._waiters.get(key)
                if waiting is not None:
                    waiting.discard(event)
                    if not waiting:
                        del self._waiters[key]

    # ------------------------------------------------------------------ execute
    async def _execute(self, request_id: str) -> TakeoverRequest:
        if request_id in self._in_flight:
            return await self.wait(request_id, timeout=30, follow=False)
        self._in_flight.add(request_id)
        try:
            return await self._execute_owned(request_id)
        finally:
            self._in_flight.discard(request_id)

    async def _execute_owned(self, request_id: str) -> TakeoverRequest:
        req = self.get_request(request_id)
        if req.status is not Status.APPROVED or not self.owns(req):
            return req
        if req.plan_id is not None and all(a.effect == "plan" for a in req.actions):
            return self._activate_plan(req)
        refusal = self._unfit_to_run(req) or self._policy_refusal(req)
        if refusal is not None:
            self._move(req, Move.FAIL, EventType.STEP_FAILED, {"reason": refusal},
                       outcome=f"failed: {refusal}; nothing was written")
            return req
        if req.expires_at <= self.clock():
            self._move(req, Move.EXPIRE, EventType.TAKEOVER_EXPIRED,
                       {"expires_at": req.expires_at.isoformat()},
                       outcome="expired before it could run (its bench was away); nothing "
                               "was written")
            return req
        lock = self._executing.setdefault(req.instrument, asyncio.Lock())
        async with lock:
            return await self._recheck_and_write(req)

    async def _recheck_and_write(self, req: TakeoverRequest) -> TakeoverRequest:
        req = self.get_request(req.id)  # it may have moved while this waited for the lock
        if req.status is not Status.APPROVED:
            return req
        inst = self.instrument(req.instrument)
        fields = self._fields(inst, req.actions)
        try:
            live = await self._snapshot(inst, fields)
        except InstrumentError as exc:
            self._move(req, Move.FAIL, EventType.STEP_FAILED, {"reason": exc.message},
                       outcome=f"failed: could not re-read the instrument before writing "
                               f"({exc.message}); nothing was written")
            return req
        diff = req.snapshot.diff(live)
        if not diff:
            stuck = [a.channel for a in req.actions
                     if a.approval is ApprovalKind.OUTPUT_ENABLE and a.channel is not None
                     and ApprovalKind.SETPOINT not in req.approved_kinds()
                     and not self._setpoint_still_approved(inst, a.channel, live)]
            if stuck:
                diff = {f"ch{c}.approved_setpoint": ("approved", "changed") for c in stuck}
        if diff:
            return await self._go_stale(req, inst, diff)
        try:  # the envelope as it is configured now, on the live state
            self._check_envelope(inst, req.actions, live)
        except Refused as exc:
            self._move(req, Move.FAIL, EventType.STEP_FAILED, {"reason": exc.message},
                       outcome=f"failed: refused at the live recheck: {exc.message}")
            return req
        if not self._move(req, Move.START, EventType.STEP_STARTED,
                          {"commands": [a.canonical for a in req.actions]}):
            return self.get_request(req.id)
        return await self._write(req, inst, fields)

    @staticmethod
    def _unfit_to_run(req: TakeoverRequest) -> str | None:
        """Invariant 3, checked again at the last moment: the approvals are bound to exactly
        this proposal (its commands and the snapshot shown), and none is missing."""
        expected = proposal_hash(req.instrument, [a.canonical for a in req.actions],
                                 req.snapshot)
        if expected != req.proposal_hash:
            return "the proposal does not match its hash"
        if req.missing():
            return "approvals missing for this exact proposal: " + ", ".join(
                k.value for k in req.missing())
        return None

    @staticmethod
    def _same_units(inst: Instrument, req: TakeoverRequest) -> Classification:
        """The units the approver was shown, from their canonical text (explicit channels),
        never the message again under the run's selection now: that may have moved, or been
        lost with a restart, and would aim the fresh request at another channel."""
        units: list[Unit] = []
        for a in req.actions:
            units.extend(dataclasses.replace(u, source=a.source, text=a.text)
                         for u in classify(a.canonical, inst.profile.name).units)
        return Classification(req.message, inst.profile.name, tuple(units), None)

    async def _go_stale(self, req: TakeoverRequest, inst: Instrument,
                        diff: dict[str, tuple[str | None, str | None]]) -> TakeoverRequest:
        run = self.get_run(req.run_id)
        shown = {k: {"shown": v[0], "live": v[1]} for k, v in diff.items()}
        summary = ", ".join(f"{k} {v[0]} → {v[1]}" for k, v in diff.items())
        if not self._move(req, Move.GO_STALE, EventType.TAKEOVER_STALE, {"diff": shown},
                          outcome=f"stale: the instrument changed since approval ({summary}); "
                                  "nothing was written, sent back for fresh review"):
            return self.get_request(req.id)
        c = self._same_units(inst, req)
        fresh_required = list(required_for([a.approval for a in req.actions],
                                           any(a.unpredictable for a in req.actions))
                              ) or [ApprovalKind.STATE]
        try:
            fresh = await self._hold(
                run, inst, req.message, c, fresh_required, reason=req.reason,
                rationale=req.rationale, confidence=req.confidence, step_id=req.step_id,
                idempotency_key=None, timeout=req.timeout_minutes, events=[], supersedes=req,
                stale_diff=diff)
        except (Refused, InstrumentError) as exc:
            # No fresh request: on the live state it would leave the envelope (or the
            # instrument cannot be read). The stale one says why, and nothing runs.
            self.store.append([Event(run_id=req.run_id, request_id=req.id,
                                     type=EventType.WRITE_REFUSED,
                                     data={"message": req.message, "reason": exc.message,
                                           "code": getattr(exc, "code", -240)})])
            return self.get_request(req.id)
        for _ in range(MAX_RETRIES):
            current = self.get_request(req.id)
            current.superseded_by = fresh.id
            if self.store.save_request(current, current.version, []):
                self._notify(current)
                return current
        return self.get_request(req.id)

    async def _write(self, req: TakeoverRequest, inst: Instrument,
                     fields: list[tuple[int | None, str]]) -> TakeoverRequest:
        started = self.clock()
        commands = [a.canonical for a in req.actions]
        profile = inst.profile
        limits = self.config.envelope.get(inst.config.name, {})
        # Read back every field the write touched, and every enveloped field of every
        # channel: the effect of a command may reach further than the profile predicts.
        readback = list(dict.fromkeys([*fields, *envelope.enveloped_fields(profile, limits)]))

        async def job(link: AsyncLink) -> _Written:
            out = _Written()
            try:
                for i, a in enumerate(req.actions):
                    if a.effect == "select":
                        continue
                    if a.canonical.split(" ")[0].endswith("?"):
                        out.answers[i] = await link.query(a.canonical)
                    else:
                        await link.write(a.canonical)
            except InstrumentError as exc:
                out.error = exc.message
            # Read back whatever happened; never retry the write blindly. Only the instrument
            # that was judged may answer: another one's values say nothing about ours.
            out.after, out.read_error = await self._read_back(link, inst, readback,
                                                              req.snapshot.idn)
            out.instrument_errors = await self._drain_errors(link, inst)
            out.safed = await self._make_safe(link, inst, out.after)
            return out

        w = await inst.lane.run(job)
        receipt = Receipt(sent=commands, before=req.snapshot.values, after=w.after or {},
                          approvals=req.valid_approvals(), started_at=started,
                          finished_at=self.clock(),
                          detail=";".join(w.answers[i] for i in sorted(w.answers)))
        judged = judge_readback(
            before=req.snapshot.values, expected=self._proposed(req.actions, req.snapshot),
            after=w.after, unverifiable=_unverifiable(req.actions),
            blind=any(a.unpredictable for a in req.actions), error=w.error,
            instrument_errors=w.instrument_errors, read_error=w.read_error)
        self._conclude(req, inst, receipt, judged, w.safed, w.after,
                       executed="executed: " + "; ".join(commands))
        return req

    async def _read_back(self, link: AsyncLink, inst: Instrument,
                         fields: list[tuple[int | None, str]], idn: str
                         ) -> tuple[dict[str, str] | None, str | None]:
        try:
            state = await self._read_state(link, inst, fields)
        except InstrumentError as exc:
            return None, exc.message
        if state.idn != idn:
            return None, f"another instrument answered: {state.idn!r}"
        return state.values, None

    @staticmethod
    async def _settle(link: AsyncLink, inst: Instrument) -> str | None:
        """Wait until the instrument has finished every pending operation (IEEE 488.2
        §10.19 ``*OPC?``), asking again after each timeout, up to SETTLE_SECONDS. None when
        settled (or the profile has no ``*OPC?``), else why not."""
        if inst.profile.lookup(True, ("OPC",)) is None:
            return None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_SECONDS
        while True:
            try:
                await link.query("*OPC?")
                return None
            except InstrumentError as exc:
                if loop.time() >= deadline:
                    return f"the instrument did not settle within {SETTLE_SECONDS:.0f} s " \
                           f"({exc.message})"

    @staticmethod
    async def _drain_errors(link: AsyncLink, inst: Instrument) -> list[str]:
        """The instrument's own error queue after a write (SCPI-99 §21.8 SYSTem:ERRor)."""
        errors: list[str] = []
        if inst.profile.lookup(False, ("SYSTEM", "ERROR")) is None:
            return errors
        with contextlib.suppress(InstrumentError):
            for _ in range(10):
                answer = await link.query("SYST:ERR?")
                if answer.lstrip("+").startswith("0"):
                    break
                errors.append(answer)
        return errors

    async def _make_safe(self, link: AsyncLink, inst: Instrument,
                         after: dict[str, str] | None) -> _Safed | None:
        """Invariant 4 after a write: an energized channel read back outside the envelope
        gets the profile's safe action at once, on the same lane turn, waiting for nobody.
        When the read-back failed, every enveloped field is read again one by one: a channel
        that cannot be shown inside (an unreadable output or limit counts as outside) is
        made safe too. One garbled answer never stops the safe action."""
        limits = self.config.envelope.get(inst.config.name, {})
        if after is None:
            after = {}
            for ch, f in envelope.enveloped_fields(inst.profile, limits):
                query = inst.profile.field_query(f, ch)
                with contextlib.suppress(InstrumentError):
                    after[snapshot_key(ch, f)] = _normalize(
                        inst.profile, f, await link.query(query), query)
            found = envelope.breaches(inst.profile, limits, after,
                                      set(limits) & set(inst.profile.channels))
        else:
            found = envelope.breaches(inst.profile, limits, after)
        if not found:
            return None
        channels = sorted({b.channel for b in found})
        safed = _Safed(found, envelope.safe_commands(inst.profile, channels))
        try:
            for command in safed.sent:
                await link.write(command)
            safe = inst.profile.safe_action
            if safe is not None:
                check = await self._read_state(link, inst, [(ch, safe.field) for ch in channels])
                safed.after = check.values
                after.update(check.values)
        except InstrumentError as exc:
            safed.error = exc.message
        return safed

    def _conclude(self, req: TakeoverRequest, inst: Instrument, receipt: Receipt,
                  judged: Judgement, safed: _Safed | None, after: dict[str, str] | None,
                  *, executed: str) -> None:
        """One ending for a write from its judged read-back, with any envelope breach."""
        receipt.reconciled = receipt.reconciled or judged.reconciled
        req.receipt = receipt
        data: dict[str, Any] = {"receipt": receipt.model_dump(mode="json")}
        if judged.unexpected:
            data["unexpected"] = {k: list(v) for k, v in judged.unexpected.items()}
        verdict, text = judged.verdict, judged.detail
        if safed is not None:
            words = envelope.summary(inst.profile, safed.found)
            done = (f"the safe action ({'; '.join(safed.sent)}) ran at once" if safed.error
                    is None else f"the safe action failed ({safed.error})")
            self.store.append([Event(
                run_id=req.run_id, request_id=req.id, type=EventType.ENVELOPE_BREACH,
                data={"breaches": [b.as_json() for b in safed.found], "safe_action": safed.sent,
                      "read_back": safed.after, "error": safed.error})])
            self._publish("alert", alert="envelope_breach", id=req.id, run_id=req.run_id,
                          instrument=req.instrument, reason=f"{words}; {done}")
            mine = {a.channel for a in req.actions} | (
                {b.channel for b in safed.found}
                if any(a.unpredictable or a.channel is None for a in req.actions) else set())
            note = f"envelope breach read back: {words}; {done}"
            if any(b.channel in mine for b in safed.found):
                verdict, text = Judged.AMBIGUOUS, f"{note}; {text}; a person must check the DUT"
            else:
                text = f"{text}; {note}"
        if verdict is Judged.EXECUTED:
            reconciled = " (reconciled from read-back)" if judged.reconciled else ""
            detail = judged.detail if (judged.reconciled or judged.unexpected
                                       or safed is not None) else ""
            outcome = executed.replace("executed", f"executed{reconciled}", 1) + (
                f" ({text})" if detail or safed is not None else "")
            if judged.reconciled:
                data["reconciled"] = True
            self._move(req, Move.FINISH, EventType.STEP_COMPLETED, data, outcome=outcome)
            if after is not None:
                self._remember_setpoints(req, inst, after)
        elif verdict is Judged.FAILED:
            self._move(req, Move.FAIL, EventType.STEP_FAILED, {**data, "reason": text},
                       outcome=f"failed: {text}")
        else:
            self._move(req, Move.LOSE_TRACK, EventType.STEP_FAILED, {**data, "reason": text},
                       outcome=f"ambiguous: {text}; a person must check the instrument"
                       if "a person must" not in text else f"ambiguous: {text}")

    def _remember_setpoints(self, req: TakeoverRequest, inst: Instrument,
                            after: dict[str, str]) -> None:
        """The live setpoint of each channel whose setpoint was approved here, with who
        approved each field of it: a field this request did not set keeps its approvers
        while its value is the one they approved."""
        if ApprovalKind.SETPOINT not in req.approved_kinds():
            return
        channels = {a.channel for a in req.actions if a.channel is not None and (
            a.approval is ApprovalKind.SETPOINT or a.approval is ApprovalKind.OUTPUT_ENABLE)}
        setpoint = [a for a in req.valid_approvals() if a.kind is ApprovalKind.SETPOINT]
        by = setpoint[0].by if setpoint else ""
        # Everyone whose approval put this setpoint in force: a plan's approvers for a step.
        people = sorted({p for a in setpoint for p in (a.people or [a.by])})
        key = self._qualified(inst.config.name)
        # Channels switched on with no approved setpoint in force: this request's setpoint
        # approval approved their present setpoint as it was.
        needed_on = {int(n["channel"]) for n in req.handoff.get("setpoint_needed") or []}
        for ch in channels:
            mine = {a.field for a in req.actions if a.channel == ch and a.effect == "setpoint"}
            needed = ch in needed_on
            prior = self.store.get_setpoint(key, ch) or {}
            by_field: dict[str, list[str]] = {}
            for f in SETPOINT_FIELDS:
                value = after.get(snapshot_key(ch, f))
                kept = (prior.get("by_field") or {}).get(f) or prior.get("people") or []
                if f in mine or needed or prior.get(f) != value or not kept:
                    by_field[f] = people
                else:
                    by_field[f] = sorted(kept)
            self.store.put_setpoint(key, ch, {
                **{f: after.get(snapshot_key(ch, f)) for f in SETPOINT_FIELDS},
                "request": req.id, "by": by, "by_field": by_field,
                "people": sorted({p for v in by_field.values() for p in v}),
                "at": self.clock().isoformat()})

    async def _reconcile_interrupted(self, req: TakeoverRequest) -> None:
        """A write was in flight when the gateway stopped: read back, never re-send."""
        inst = self.instrument(req.instrument)
        limits = self.config.envelope.get(inst.config.name, {})
        fields = list(dict.fromkeys([*self._fields(inst, req.actions),
                                     *envelope.enveloped_fields(inst.profile, limits)]))

        async def job(link: AsyncLink) -> _Written:
            out = _Written()
            # A write cut off by the crash may still be inside the instrument: let it finish
            # before judging, or a late change would be judged "nothing took effect".
            unsettled = await self._settle(link, inst)
            if unsettled is not None:
                out.read_error = unsettled
                return out
            out.after, out.read_error = await self._read_back(link, inst, fields,
                                                              req.snapshot.idn)
            out.safed = await self._make_safe(link, inst, out.after)
            return out

        w = await inst.lane.run(job)
        receipt = Receipt(sent=[], before=req.snapshot.values, after=w.after or {},
                          approvals=req.valid_approvals(), started_at=self.clock(),
                          finished_at=self.clock(), reconciled=True,
                          detail="interrupted by a restart; reconciled from read-back")
        judged = judge_readback(
            before=req.snapshot.values, expected=self._proposed(req.actions, req.snapshot),
            after=w.after, unverifiable=_unverifiable(req.actions),
            blind=any(a.unpredictable for a in req.actions),
            error="interrupted by a restart before its read-back; nothing is re-sent",
            instrument_errors=[], read_error=w.read_error)
        self._conclude(req, inst, receipt, judged, w.safed, w.after,
                       executed="executed (reconciled after a restart)")

    # ------------------------------------------------------------------ state
    async def live_state(self, instrument: str) -> dict[str, Any]:
        """Every field of every channel, measured values included, read live."""
        inst = self.instrument(instrument)
        profile = inst.profile
        channels: list[int | None] = list(profile.channels) or [None]
        fields = [(ch, f) for ch in channels for f in profile.fields]
        snap = await self._snapshot(inst, fields)
        out: dict[str, Any] = {"instrument": instrument, "idn": snap.idn,
                               "at": snap.taken_at.isoformat(), "channels": {}}
        for ch in channels:
            out["channels"][str(ch) if ch is not None else "-"] = {
                f: snap.values.get(snapshot_key(ch, f)) for f in profile.fields}
        return out

    # ------------------------------------------------------------------ denial limits
    def _after_denial(self, req: TakeoverRequest, why: str) -> None:
        """Count denials (an expiry is one); suspend a run that keeps being told no."""
        if req.plan_id is not None and all(a.effect == "plan" for a in req.actions):
            self._close_plan(req.plan_id, PlanStatus.DENIED)
        events: list[Event] = []
        if req.handoff.get("confidence_gate"):
            events.append(Event(run_id=req.run_id, request_id=req.id,
                                type=EventType.STEP_FAILED,
                                data={"reason": f"diverted step {why}", "step_id": req.step_id}))
        run = self.store.get_run(req.run_id)
        if run is None:
            return
        run.denials_in_a_row += 1
        run.denials_total += 1
        policy = self.config.policy
        if run.status is not RunStatus.SUSPENDED and (
                run.denials_in_a_row >= policy.denials_in_a_row
                or run.denials_total >= policy.denials_total):
            run.status = RunStatus.SUSPENDED
            reason = (f"{run.denials_in_a_row} denials in a row"
                      if run.denials_in_a_row >= policy.denials_in_a_row
                      else f"{run.denials_total} denials in all")
            run.takeover_reason = f"suspended after {reason}"
            events.append(Event(run_id=run.id, type=EventType.RUN_SUSPENDED,
                                data={"reason": run.takeover_reason,
                                      "in_a_row": run.denials_in_a_row,
                                      "total": run.denials_total}))
            self._publish("run", id=run.id, status=run.status.value)
        self.store.save_run(run, events)

    def _after_move(self, req: TakeoverRequest, dst: Status) -> None:
        if dst is Status.EXECUTED:
            run = self.store.get_run(req.run_id)
            if run is not None and run.denials_in_a_row:
                run.denials_in_a_row = 0
                self.store.save_run(run, [])
        if dst is Status.CANCELLED and req.plan_id is not None and \
                all(a.effect == "plan" for a in req.actions):
            self._close_plan(req.plan_id, PlanStatus.DENIED)  # a cancelled plan never starts
        auto = req.handoff.get("auto_step")
        if auto and dst in TERMINAL:
            record = self.store.kv_get("auto_steps", req.id)
            if record is not None:
                record["outcome"] = dst.value
                self.store.kv_put("auto_steps", req.id, record)

    # ------------------------------------------------------------------ plans
    def _plans_of(self, run_id: str) -> list[Plan]:
        return [Plan.model_validate(p) for p in self.store.kv_list("plans")
                if p.get("run_id") == run_id]

    def list_plans(self, run_id: str) -> list[Plan]:
        self.get_run(run_id)
        plans = self._plans_of(run_id)
        for plan in plans:
            self._refresh_plan(plan)
        return sorted(plans, key=lambda p: p.created_at)

    def get_plan(self, plan_id: str) -> Plan:
        raw = self.store.kv_get("plans", plan_id)
        if raw is None:
            raise NotFound(f"no plan {plan_id!r}")
        plan = Plan.model_validate(raw)
        self._refresh_plan(plan)
        return plan

    def _save_plan(self, plan: Plan) -> None:
        self.store.kv_put("plans", plan.id, plan.model_dump(mode="json"))

    def _refresh_plan(self, plan: Plan) -> None:
        if plan.status is PlanStatus.ACTIVE and plan.expires_at is not None and \
                plan.expires_at <= self.clock():
            plan.status = PlanStatus.EXPIRED
            self._save_plan(plan)

    def _close_plan(self, plan_id: str, status: PlanStatus) -> None:
        raw = self.store.kv_get("plans", plan_id)
        if raw is not None:
            plan = Plan.model_validate(raw)
            if plan.status in (PlanStatus.PENDING, PlanStatus.ACTIVE):
                plan.status = status
                self._save_plan(plan)

    async def request_plan(self, run_id: str, scope: PlanScope | dict[str, Any],
                           rationale: str | None = None) -> TakeoverRequest:
        """Ask for a standing plan: a takeover request whose proposal is the plan's scope."""
        refuse_token(rationale, "rationale")
        run = self.get_run(run_id)
        try:
            scope = PlanScope.model_validate(scope)
        except ValidationError as exc:
            first = exc.errors()[0]["loc"] if exc.errors() else ()
            raise InvalidInput("plan scope: " + "; ".join(
                f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()),
                field=str(first[0]) if first else None) from exc
        inst = self.instrument(scope.instrument)
        limits = self.config.envelope.get(scope.instrument, {})
        for ch in scope.channels:
            if ch not in inst.profile.channels:
                raise InvalidInput(f"plan scope: {scope.instrument} has no channel {ch}",
                                   field="channels")
            bounds = limits.get(ch)
            hard_v = inst.profile.range_of("voltage", ch)
            hard_i = inst.profile.range_of("current", ch)
            vmax = bounds.voltage if bounds is not None and bounds.voltage is not None else (
                hard_v[1] if hard_v else None)
            imax = bounds.current if bounds is not None and bounds.current is not None else (
                hard_i[1] if hard_i else None)
            if vmax is not None and scope.voltage[1] > vmax:
                raise InvalidInput(f"plan scope: CH{ch} voltage up to {scope.voltage[1]} V is "
                                   f"above the bench limit of {vmax} V", field="voltage")
            if imax is not None and scope.current_max > imax:
                raise InvalidInput(f"plan scope: CH{ch} current {scope.current_max} A is above "
                                   f"the bench limit of {imax} A", field="current_max")
        snap = await self._snapshot(inst, [(ch, f) for ch in scope.channels
                                           for f, spec in inst.profile.fields.items()
                                           if not spec.measured])
        plan_id = _new_id("plan")
        words = scope_words(scope)
        actions = [Action(index=i, source=0, text=line, effect="plan", canonical=line,
                          words=line) for i, line in enumerate(words)]
        required = [ApprovalKind.SETPOINT] + (
            [ApprovalKind.OUTPUT_ENABLE] if scope.output_enable else [])
        created = self.clock()
        req = TakeoverRequest(
            id=_new_id("tk"), run_id=run.id, instrument=scope.instrument,
            message=f"plan: {'; '.join(words)}", actions=actions, required=required,
            reason=rationale or f"{run.kind.value} {run.principal} asks for a standing plan",
            rationale=rationale, timeout_minutes=self._timeout(None), created_at=created,
            expires_at=created + timedelta(minutes=self._timeout(None)), snapshot=snap,
            proposal_hash=proposal_hash(scope.instrument, [scope.digest(), *words], snap),
            plan_id=plan_id, bench=self.config.bench)
        history = self.store.recent(run.id, limit=40)
        req.handoff = build_handoff(req, run, inst.profile, limits, history, dict(snap.values))
        req.handoff["plan"] = {"id": plan_id, "scope": scope.model_dump(mode="json"),
                               "words": words}
        req.handoff["reversibility"] = (
            "standing approval: writes inside this scope will run without asking again"
            + (", outputs included" if scope.output_enable else ""))
        plan = Plan(id=plan_id, run_id=run.id, request_id=req.id, scope=scope,
                    scope_hash=scope.digest(), created_at=created)
        self._save_plan(plan)
        stored = self.store.create_request(req, [Event(
            run_id=run.id, request_id=req.id, type=EventType.TAKEOVER_REQUESTED,
            data=req.handoff)])
        self._notify(stored)
        return stored

    def _activate_plan(self, req: TakeoverRequest) -> TakeoverRequest:
        assert req.plan_id is not None
        plan = self.get_plan(req.plan_id)
        if plan.scope_hash != plan.scope.digest() or \
                req.handoff.get("plan", {}).get("scope") != plan.scope.model_dump(mode="json"):
            self._move(req, Move.FAIL, EventType.STEP_FAILED,
                       {"reason": "the plan's scope changed after it was shown"},
                       outcome="failed: the plan's scope is not the one approved")
            return req
        if not self._move(req, Move.START, EventType.STEP_STARTED, {"plan_id": plan.id}):
            return self.get_request(req.id)
        plan.status = PlanStatus.ACTIVE
        plan.expires_at = self.clock() + timedelta(minutes=plan.scope.timeout_minutes)
        plan.approved_by = sorted({a.by for a in req.valid_approvals()})
        self._save_plan(plan)
        self.store.append([Event(run_id=req.run_id, request_id=req.id,
                                 type=EventType.PLAN_ACTIVATED,
                                 data={"plan_id": plan.id, "by": plan.approved_by,
                                       "expires_at": plan.expires_at.isoformat(),
                                       "scope": plan.scope.model_dump(mode="json")})])
        self._move(req, Move.FINISH, EventType.STEP_COMPLETED, {"plan_id": plan.id},
                   outcome=f"plan {plan.id} active until {plan.expires_at.isoformat()}")
        return req

    def revoke_plan(self, plan_id: str, operator: Principal) -> Plan:
        self._require_operator(operator)
        plan = self.get_plan(plan_id)
        if plan.status is PlanStatus.PENDING:
            with contextlib.suppress(TransitionError):
                req = self.get_request(plan.request_id)
                self._move(req, Move.CANCEL, EventType.TAKEOVER_CANCELLED,
                           {"by": operator.name, "reason": "plan revoked"},
                           outcome="cancelled: the plan was revoked")
        elif plan.status is not PlanStatus.ACTIVE:
            raise TransitionError(plan.id, plan.status.value, "revoke")
        plan.status = PlanStatus.REVOKED
        plan.revoked_by = operator.name
        self._save_plan(plan)
        self.store.append([Event(run_id=plan.run_id, type=EventType.PLAN_REVOKED,
                                 data={"plan_id": plan.id, "by": operator.name})])
        self._publish("plan", id=plan.id, run_id=plan.run_id, status=plan.status.value)
        return plan

    async def _try_plan(self, run: Run, inst: Instrument, message: str, c: Classification,
                        unjournaled: list[Event], *, rationale: str | None,
                        confidence: float | None,
                        step_id: str | None, idempotency_key: str | None,
                        ) -> TakeoverRequest | dict[str, Any] | None:
        """Run a write inside the run's live plan; or say why the gate diverts it; or None.

        A run's plan writes are judged and spent one at a time (a lock per run), so two
        concurrent writes can never both spend the last write. Every write unit counts."""
        if not any(p.status is PlanStatus.ACTIVE and p.scope.instrument == inst.config.name
                   for p in self._plans_of(run.id)):
            return None
        lock = self._plan_locks.setdefault(run.id, asyncio.Lock())
        async with lock:
            return await self._spend_plan(run, inst, message, c, unjournaled,
                                          rationale=rationale, confidence=confidence,
                                          step_id=step_id, idempotency_key=idempotency_key)

    async def _spend_plan(self, run: Run, inst: Instrument, message: str, c: Classification,
                          unjournaled: list[Event], *, rationale: str | None,
                          confidence: float | None, step_id: str | None,
                          idempotency_key: str | None,
                          ) -> TakeoverRequest | dict[str, Any] | None:
        plans = [p for p in self._plans_of(run.id)  # read again, under the lock
                 if p.status is PlanStatus.ACTIVE and p.scope.instrument == inst.config.name]
        if not plans:
            return None
        actions = self._actions(inst, c, None)
        live = await self._snapshot(inst, self._fields(inst, actions))
        writes = sum(1 for u in c.units if u.writes and u.effect is not Effect.HARMLESS)
        plan = None
        for candidate in plans:
            self._refresh_plan(candidate)
            if candidate.status is PlanStatus.ACTIVE and candidate.writes_left >= writes and \
                    covers(candidate, inst.config.name, c.units, live.values) is None:
                plan = candidate
                break
        if plan is None:
            return None
        self._check_envelope(inst, self._actions(inst, c, live), live)
        gate = apply_env(self.config.confidence)
        if run.kind is RunKind.AGENT and gate.enabled:
            kinds = sorted({a.approval.value for a in actions if a.approval is not None})
            threshold = max((threshold_for(gate, k) for k in kinds), default=gate.threshold)
            trajectory = [str(e.data.get("message")) for e in self.store.recent(run.id, 20)
                          if e.type is EventType.COMMAND_RECEIVED]
            regret = self._regret(",".join(kinds)) if gate.calibrate else 0.0
            scored = await score(gate, stated=confidence, rationale=rationale,
                                 action=message, goal=run.goal, trajectory=trajectory,
                                 regret=regret)
            divert = scored.value < threshold
            self.store.append([*unjournaled, Event(
                run_id=run.id, type=EventType.CONFIDENCE_EVALUATED,
                data={"score": round(scored.value, 4), "threshold": round(threshold, 4),
                      "decision": "divert" if divert else "execute", "effect": kinds,
                      "estimator": scored.estimator, "note": scored.note,
                      "regret": regret, "step_id": step_id, "message": message})])
            unjournaled.clear()
            if divert:
                return {"reason": f"confidence {scored.value:.2f} < {threshold:.2f}",
                        "score": scored.value, "threshold": threshold,
                        "estimator": scored.estimator, "note": scored.note,
                        "plan_id": plan.id}
        plan.writes_used += writes
        if plan.writes_left == 0:
            plan.status = PlanStatus.EXHAUSTED
        self._save_plan(plan)
        required = sorted({a.approval for a in actions if a.approval is not None},
                          key=list(ApprovalKind).index) or [ApprovalKind.STATE]
        created = self.clock()
        req = TakeoverRequest(
            id=_new_id("tk"), run_id=run.id, instrument=inst.config.name, message=message,
            actions=self._actions(inst, c, live), required=required, status=Status.APPROVED,
            reason=f"inside plan {plan.id}", step_id=step_id, rationale=rationale,
            confidence=confidence, idempotency_key=idempotency_key, timeout_minutes=1,
            created_at=created, expires_at=created + timedelta(minutes=1), snapshot=live,
            proposal_hash="", plan_id=plan.id, bench=self.config.bench)
        req.proposal_hash = proposal_hash(inst.config.name,
                                          [a.canonical for a in req.actions], live)
        by = f"plan {plan.id} (approved by {', '.join(plan.approved_by)})"
        req.approvals = [Approval(kind=k, by=by, proposal_hash=req.proposal_hash,
                                  people=list(plan.approved_by)) for k in required]
        req.handoff = {"command": message, "plan": plan.id, "auto_step": True,
                       "actions": [a.model_dump(mode="json") for a in req.actions]}
        events = [*unjournaled]
        unjournaled.clear()
        events.append(Event(run_id=run.id, request_id=req.id, type=EventType.APPROVAL_GRANTED,
                            data={"kinds": [k.value for k in required], "by": by,
                                  "plan_id": plan.id, "writes_left": plan.writes_left}))
        stored = self.store.create_request(req, events)
        if stored.id != req.id:
            return stored
        self.store.kv_put("auto_steps", req.id, {
            "run_id": run.id, "step_id": step_id, "effect": ",".join(
                k.value for k in required), "outcome": None})
        return await self._execute(req.id)

    def feedback(self, run_id: str, step_id: str, score_value: int, notes: str = "",
                 who: Principal | None = None) -> dict[str, Any]:
        """Feedback on an unattended step (1-5); 2 or less counts as regret.

        Kept per (step, person) with the person's role, so nobody's feedback overwrites
        another's. Only people who may judge (operators, admins) teach the calibration: a
        requester's feedback (or an unauthenticated caller's) is journaled, and changes
        nothing (``calibrates`` says which)."""
        self.get_run(run_id)
        if not 1 <= score_value <= 5:
            raise InvalidInput(f"feedback score must be 1 to 5, not {score_value}")
        refuse_token(step_id, "step_id")
        refuse_token(notes, "notes")
        role = who.role if who is not None else None
        calibrates = role in (Role.OPERATOR, Role.ADMIN)
        record = {"run_id": run_id, "step_id": step_id, "score": score_value, "notes": notes,
                  "by": who.name if who else None, "role": role.value if role else None,
                  "calibrates": calibrates, "at": self.clock().isoformat()}
        by = person(who.name) if who is not None else ""
        self.store.kv_put("feedback", f"{run_id}/{step_id}/{role or 'nobody'}/{by}", record)
        self.store.append([Event(run_id=run_id, type=EventType.FEEDBACK_GIVEN, data=record)])
        return record

    def _regret(self, effect: str) -> float:
        """Share of unattended steps of this kind that failed, or that someone who may
        judge (an operator or admin) scored 2 or less. One judge's low score counts
        whatever others said; a requester's feedback never counts, so an agent cannot
        talk its own regret down. A record from before roles were kept counts only as
        regret (it may have been the requester's, which could only have been praise)."""
        try:
            steps = [s for s in self.store.kv_list("auto_steps") if s.get("effect") == effect
                     and s.get("outcome") is not None]
            if len(steps) < 3:
                return 0.0
            regretted: set[str] = set()
            for f in self.store.kv_list("feedback"):
                try:
                    low = int(f["score"]) <= 2
                    judged = f.get("calibrates") is True or "role" not in f
                    if low and judged:
                        regretted.add(f"{f['run_id']}/{f['step_id']}")
                except (KeyError, TypeError, ValueError):
                    continue  # one malformed record never hides the others
            bad = sum(1 for step in steps if step.get("outcome") in ("failed", "ambiguous")
                      or f"{step.get('run_id')}/{step.get('step_id')}" in regretted)
            return bad / len(steps)
        except GatewayError:
            return 0.0  # calibration never blocks a decision on its own store error
