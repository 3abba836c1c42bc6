"""Intake: what happens to one message a requester submits, up to "it ran" or "it waits".

Screen it (screen.py: a token or a socket-door command never gets further), classify it
with the instrument's profile, decide (pass, refuse, hold), apply the run's status
(suspended, taken over, closed), then either run it at once on the lane (reads.py: reads,
harmless writes, the safe action), try the run's plan, or hold it for a person. Idempotent
retries get their first result; the same key with another request is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from .auth import redact, refuse_token
from .confidence import stated_confidence
from .core import Core, Instrument, Part
from .errors import IdempotencyKeyReused, InstrumentError, InvalidInput, Refused, WrongInstrument
from .identity import nothing
from .interlocks import Interlocks
from .journal import ReadJournal, read_log_path
from .leases import Leases
from .models import ApprovalKind, Event, EventType, RunStatus, Status, TakeoverRequest, now
from .planning import PlanDesk
from .policy import Verdict, decide
from .reads import ReadPlans, excites_now, run_plan, run_units
from .runs import Runs
from .scpi import (
    Classification,
    Excites,
    ScpiError,
    as_exciting,
    classify,
)
from .screen import door_only
from .selections import Selections
from .states import UNDECIDED, Outcome
from .store import read_row
from .takeover import Requests
from .texts import hidden

__all__ = ["Intake", "Outcome", "SubmitResult", "door_only"]


@dataclass(slots=True)
class SubmitResult:
    """What a requester gets back from :meth:`Gateway.submit`."""

    status: Outcome
    response: str | None = None
    request: TakeoverRequest | None = None
    code: int = 0
    reason: str = ""


class Intake(Part):
    def __init__(self, core: Core, requests: Requests, runs: Runs, plans: PlanDesk,
                 interlocks: Interlocks, leases: Leases) -> None:
        super().__init__(core)
        self.requests = requests
        self.runs = runs
        self.plans = plans
        self.interlocks = interlocks
        self.leases = leases
        #: Each run's selected channel per instrument: per run, never sent, kept in the store.
        self._selected = Selections(core)
        runs.on_close.append(self._selected.forget)
        #: Reads that passed, kept to run again without being worked out again (reads.py).
        self._plans = ReadPlans()
        self._reads = ReadJournal(core.store, read_log_path(core.store, core.config),
                                  core.config.journal.fold_seconds)

    def open_reads(self) -> int:
        """Open the read log, folding what a crash left (how many reads)."""
        return self._reads.open()

    async def close(self) -> None:
        await self._reads.close()

    async def _classify(self, run_id: str, inst: Instrument, message: str) -> Classification:
        selected = self._selected.get(run_id, inst.config.name)
        c = classify(message, inst.profile.name, selected=selected)
        # A unit that acts on a channel but names none (``CURR:PROT:STAT 0``, ``VOLT:TRIG 5``)
        # would act on the instrument's selection when it runs, which the approver never
        # saw: the run's channel is asked for now and written out.
        profile = inst.profile
        needs_channel = bool(profile.channels) and any(
            u.channel is None and (u.field is not None or (
                (form := profile.form_of(u.canonical)) is not None and form.channel == "list"))
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
        return c

    def _select(self, run_id: str, inst: Instrument, c: Classification) -> None:
        """Keep the message's selection as the run's, once the message runs or is held:
        a refused message changes nothing, its selection included (docs/profiles.md)."""
        if c.selected is not None:
            self._selected.set(run_id, inst.config.name, c.selected, inst.profile)

    def reselected(self, run_id: str, inst: Instrument, channel: int) -> None:
        """The run's selection after a recall ran: the one the instrument has now."""
        self._selected.set(run_id, inst.config.name, channel, inst.profile)

    async def read(self, run_id: str, instrument: str, message: str, origin: str = "client"
                   ) -> SubmitResult | None:
        """A read that passed before, in one step from the door's message to its record:
        run from its plan (reads.py), with what can change between two reads checked again
        (the run known and not closed, the reading's timing; the plan's own profile,
        envelope and policy; on the lane's turn the instrument lock and the excitation).
        For a message with nothing attached (no rationale, confidence, step, idempotency
        key or timeout). None: not a kept read; :meth:`submit` works it out."""
        self.leases.renew(run_id)  # any submit says the client is still there
        if not self.runs.known(run_id) or self.runs.is_closed(run_id):
            return None
        inst = self.core.instrument(instrument)
        name = inst.config.name
        selected = self._selected.get(run_id, name)
        plan = self._plans.get(inst, message, selected, origin,
                               self.config.envelope.get(name), self.config.policy)
        if plan is None or inst.timing.refusal(plan.units) is not None:
            return None  # a refusal is journaled the long way
        received_at = now()
        c = plan.classification
        try:
            response = await run_plan(inst, plan, selected)
        except InstrumentError as exc:
            self.store.append([
                Event(run_id=run_id, type=EventType.COMMAND_RECEIVED, at=received_at,
                      data=plan.received),
                Event(run_id=run_id, type=EventType.STEP_FAILED,
                      data={"message": message, "reason": exc.message})])
            raise
        except Excites as exc:  # nothing was sent: decided again, as excites
            return await self.submit(run_id, name, message, origin=origin,
                                     excites=exc.applies)
        self._select(run_id, inst, c)
        self._reads.append_rows(plan.rows(run_id, received_at, now(), response))
        return SubmitResult(Outcome.EXECUTED, response=response)

    async def submit(self, run_id: str, instrument: str, message: str, *,
                     rationale: str | None = None, confidence: float | None = None,
                     step_id: str | None = None, idempotency_key: str | None = None,
                     timeout_minutes: int | None = None, on_resend: bool = False,
                     origin: str = "client", excites: str | None = None) -> SubmitResult:
        """``excites``: what the meter applies, found on the lane turn of a reading that was
        about to pass (scpi/_excitation.py); the message is then decided as excites."""
        if excites is None and rationale is None and confidence is None \
                and step_id is None and idempotency_key is None and timeout_minutes is None:
            again = await self.read(run_id, instrument, message, origin)
            if again is not None:
                return again
        else:
            self.leases.renew(run_id)  # any submit says the client is still there
        # A known run exists (runs are never deleted): it is read only if a write needs it.
        run = None if self.runs.known(run_id) else self.runs.get(run_id)
        inst = self.core.instrument(instrument)
        asked = (instrument, message, rationale, confidence, step_id, timeout_minutes)
        if idempotency_key is not None:
            earlier = self.store.find_request(run_id, idempotency_key)
            if earlier is not None:
                self._same_request(earlier, idempotency_key, *asked)
                return self.result(earlier)
        if confidence is not None and not 0 <= confidence <= 1:
            raise InvalidInput(f"confidence must be between 0 and 1, not {confidence}")
        refuse_token(step_id, "step_id")
        unseen = hidden(rationale)  # shown to the approver beside the proposal
        if unseen is not None:
            raise InvalidInput(f"rationale {unseen}", field="rationale")
        stated_confidence(rationale)  # a "Confidence: 9500%" is refused, never clamped
        timeout = self.requests.timeout(timeout_minutes)
        refusal = door_only(message, rationale)
        if refusal is not None:
            code, reason = refusal
            self.store.append([
                Event(run_id=run_id, type=EventType.COMMAND_RECEIVED,
                      data={"instrument": instrument, "message": redact(message),
                            "rationale": redact(rationale), "step_id": step_id}),
                Event(run_id=run_id, type=EventType.WRITE_REFUSED,
                      data={"message": redact(message), "code": code, "reason": reason})])
            return SubmitResult(Outcome.REFUSED, code=code, reason=reason)
        received_at = now()  # its event is made only if not a read (those are rows)
        received_data: dict[str, str | float | list[str] | None] = {
            "instrument": instrument, "message": message, "rationale": rationale,
            "confidence": confidence, "step_id": step_id, "origin": origin}

        def received() -> Event:
            return Event(run_id=run_id, type=EventType.COMMAND_RECEIVED, at=received_at,
                         data=received_data)
        selected_before = self._selected.get(run_id, inst.config.name)
        try:  # classified by a profile only if it describes what answers (identity.py)
            if inst.identity.due(inst.lane.link):
                await inst.lane.run(nothing, whole=False)
        except WrongInstrument as exc:
            self.store.append([received(), Event(run_id=run_id, type=EventType.WRITE_REFUSED,
                              data={"message": message, "code": -241, "reason": exc.message})])
            raise
        except InstrumentError:
            pass  # unreachable: whatever reaches it later asks again first (the lane)
        try:
            c = await self._classify(run_id, inst, message)
            if excites is not None:
                c = as_exciting(c, excites)
            too_long = inst.timing.refusal(c.units)  # a reading that would park the lane
            if too_long is not None:
                raise ScpiError(-222, too_long)
        except ScpiError as exc:
            self.store.append([received(), Event(
                run_id=run_id, type=EventType.WRITE_REFUSED,
                data={"message": message, "code": exc.code, "reason": exc.message})])
            return SubmitResult(Outcome.REFUSED, code=exc.code, reason=exc.message)
        limits = self.config.envelope.get(instrument)
        decision = decide(c, limits or {}, self.config.policy)
        if decision.verdict is Verdict.REFUSE:
            self.store.append([received(), Event(
                run_id=run_id, type=EventType.WRITE_REFUSED,
                data={"message": message, "code": decision.code, "reason": decision.reason})])
            return SubmitResult(Outcome.REFUSED, code=decision.code, reason=decision.reason)
        read_only = c.read_only
        if run is None and (not read_only or decision.verdict is not Verdict.PASS
                            or self.runs.is_closed(run_id)):
            run = self.runs.get(run_id)  # fresh: a takeover or suspension decides a write
        reason = ""
        if run is not None and run.status is RunStatus.CLOSED:
            reason = "the run is closed: nothing more runs in it; start a new run"
        elif not read_only and (self.core.registry.lost is not None  # fenced: no write
                                or not all(self.interlocks.allowed(u) for u in c.units)):
            try:
                self.interlocks.check(instrument)  # an emergency stop refuses every write
            except Refused as exc:
                reason = exc.message
        if not reason and run is not None and (not read_only or decision.verdict is Verdict.HOLD):
            reason = self.runs.may_write(run) or ""  # anything a person would decide
        if reason:
            self.store.append([received(), Event(
                run_id=run_id, type=EventType.WRITE_REFUSED,
                data={"message": message, "code": -203, "reason": reason})])
            return SubmitResult(Outcome.REFUSED, code=-203, reason=reason)
        if run is not None and run.status is RunStatus.SUSPENDED:
            reason = "the run is suspended; an operator must release it"
            if not read_only:
                self.store.append([received(), Event(
                    run_id=run_id, type=EventType.WRITE_REFUSED,
                    data={"message": message, "code": -203, "reason": reason})])
                return SubmitResult(Outcome.REFUSED, code=-203, reason=reason)
        held = decision.verdict is Verdict.HOLD or (
            run is not None and run.status is RunStatus.TAKEN_OVER and not read_only)
        if not held:
            found: str | None = None  # what the meter's function applies, if it excites
            try:
                response = await run_units(inst, list(c.units), selected_before,
                                           read_only=read_only)
            except InstrumentError as exc:
                self.store.append([received(), Event(
                    run_id=run_id, type=EventType.STEP_FAILED,
                    data={"message": message, "reason": exc.message})])
                raise
            except Excites as exc:  # nothing was sent: decided again, as excites
                found = exc.applies
            else:
                self._select(run_id, inst, c)
                data: dict[str, str | float | list[str] | None] = {
                    "message": message, "canonical": list(c.canonical), "response": response}
                if read_only:  # in the read log before the answer leaves
                    self._reads.append_rows([
                        read_row(run_id, EventType.COMMAND_RECEIVED, received_at,
                                 received_data),
                        read_row(run_id, EventType.READ_EXECUTED, now(), data)])
                    if excites is None and rationale is None and confidence is None and \
                            step_id is None and idempotency_key is None and \
                            timeout_minutes is None and c is classify(
                                message, inst.profile.name, selected=selected_before):
                        self._plans.keep(inst, message, selected_before, origin, c, limits,
                                         self.config.policy, received_data)
                else:  # a write that runs unattended (the safe action): fsync'd like any
                    self.store.append([received(), Event(
                        run_id=run_id, type=EventType.READ_EXECUTED, data=data)])
            if found is None:
                return SubmitResult(Outcome.EXECUTED, response=response)
            return await self.submit(
                run_id, instrument, message, rationale=rationale, confidence=confidence,
                step_id=step_id, idempotency_key=idempotency_key,
                timeout_minutes=timeout_minutes, origin=origin, excites=found,
                on_resend=on_resend)
        if run is None:  # pragma: no cover - a held message always loaded its run above
            run = self.runs.get(run_id)
        if excites is None:  # held for another reason: its readings are asked about too
            found = await excites_now(inst, c)
            if found is not None:  # shown to the approver as excites, needing its approval
                return await self.submit(
                    run_id, instrument, message, rationale=rationale, confidence=confidence,
                    step_id=step_id, idempotency_key=idempotency_key,
                    timeout_minutes=timeout_minutes, origin=origin, excites=found,
                    on_resend=on_resend)
        required = list(decision.required) or [ApprovalKind.STATE]
        gate_note: dict[str, Any] | None = None
        unjournaled = [received()]
        try:
            if decision.verdict is Verdict.HOLD and run.status is RunStatus.ACTIVE:
                via_plan = await self.plans.try_plan(run, inst, message, c, unjournaled,
                                                     rationale=rationale,
                                                     confidence=confidence, step_id=step_id,
                                                     idempotency_key=idempotency_key)
                if isinstance(via_plan, TakeoverRequest):
                    self._select(run_id, inst, c)
                    if idempotency_key is not None:  # a concurrent twin may have won the key
                        self._same_request(via_plan, idempotency_key, *asked)
                    return self.result(via_plan)
                gate_note = via_plan
            req = await self.requests.hold(
                run, inst, message, c, required,
                reason=rationale or f"{run.kind.value} {run.principal} asks to run {message!r}",
                rationale=rationale, confidence=confidence, step_id=step_id,
                idempotency_key=idempotency_key, timeout=timeout, events=unjournaled,
                gate=gate_note, on_resend=on_resend)
            self._select(run_id, inst, c)
            if idempotency_key is not None:  # a concurrent twin may have won the key
                self._same_request(req, idempotency_key, *asked)
        except Refused as exc:  # the predicted state leaves the envelope: never held
            self.store.append([*unjournaled, Event(
                run_id=run_id, type=EventType.WRITE_REFUSED,
                data={"message": message, "code": exc.code, "reason": exc.message})])
            return SubmitResult(Outcome.REFUSED, code=exc.code, reason=exc.message)
        except InstrumentError as exc:
            self.store.append([*unjournaled, Event(
                run_id=run_id, type=EventType.STEP_FAILED,
                data={"message": message, "reason": f"no snapshot: {exc.message}"})])
            raise
        return self.result(req)

    async def resent(self, run_id: str, request_id: str, message: str
                     ) -> TakeoverRequest | None:
        """A resend of a request that runs on its requester's resend (``on_resend``, the
        socket door's ``on_hold = "refuse"``). None if it is not that request's: another
        run (another requester or connection), or not its identical canonical command on
        its instrument (an edit by the approver is another command). Else the request: if
        approved and not expired, the resend is journaled and the request is to run now;
        past its expiry it ends expired here; otherwise as it stands."""
        req = self.requests.get(request_id)
        if req.run_id != run_id or not req.on_resend:
            return None
        if req.status is not Status.APPROVED:
            return req
        if req.expires_at <= self.clock():
            self.requests.expire_unsent(req)
            return self.requests.get(req.id)
        try:
            c = await self._classify(run_id, self.core.instrument(req.instrument), message)
        except ScpiError:
            return None
        if c.canonical != tuple(a.canonical for a in req.actions):
            return None
        self.store.append([Event(run_id=run_id, request_id=req.id,
                                 type=EventType.COMMAND_RECEIVED,
                                 data={"instrument": req.instrument, "message": message,
                                       "origin": "client", "resend_of": req.id})])
        return req

    def _same_request(self, earlier: TakeoverRequest, key: str, instrument: str,
                      message: str, rationale: str | None, confidence: float | None,
                      step_id: str | None, timeout_minutes: int | None) -> None:
        """Only an exact retry gets the earlier result; another request under the same key
        is refused. A write run inside a plan has a timeout of its own."""
        planned = bool(earlier.handoff.get("auto_step"))
        minutes = self.config.policy.default_timeout_minutes \
            if timeout_minutes is None else timeout_minutes
        differs = [name for name, was, now_ in (
            # Instrument names are per bench: another bench's psu is another instrument.
            ("bench", earlier.bench or self.config.bench, self.config.bench),
            ("instrument", earlier.instrument, instrument),
            ("command", earlier.message, message),
            ("rationale", earlier.rationale, rationale),
            ("confidence", earlier.confidence, confidence),
            ("step id", earlier.step_id, step_id),
            ("timeout", None if planned else earlier.timeout_minutes,
             None if planned else minutes)) if was != now_]
        if differs:
            raise IdempotencyKeyReused(key, earlier.id, differs)

    def result(self, req: TakeoverRequest) -> SubmitResult:
        response = req.receipt.detail if req.receipt is not None else None
        reason = req.outcome or ""
        return SubmitResult(Outcome(req.status.value), response=response or None, request=req,
                            code=0 if req.status is Status.EXECUTED or req.status in UNDECIDED
                            else -203, reason=reason)
