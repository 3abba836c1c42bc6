"""The executor: an approved request, just before it runs, is checked again (its approvals
bound to this exact proposal, the owner's rules, the expiry), then on the instrument's lane
the live state is re-read and compared with what the approver saw (a difference sends it
back as ``stale`` with a fresh request: stale.py), the envelope is checked on the live
state, the canonical commands are written and read back, with the safe action for any
breach. The judged read-back becomes the request's outcome in conclusions.py, which also
reconciles a write interrupted by a restart from a read-back, never re-sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from . import envelope
from .conclusions import Conclusions
from .core import Core, Instrument, Part
from .errors import GatewayError, NotFound, Refused, StoreError, WrongInstrument
from .identity import Refusing
from .instruments import AsyncLink
from .interlocks import Interlocks
from .leases import Leases
from .models import (
    Approval,
    Event,
    EventType,
    Receipt,
    SentLine,
    Status,
    TakeoverRequest,
)
from .readback import judge_readback
from .rechecks import Rechecks, Refusal
from .runs import Runs
from .safety import Safety, Written
from .scpi import excitation_now, measures_now
from .selections import read_selection
from .sending import Sender
from .setpoints import Setpoints
from .snapshots import Snapshots, unverifiable
from .stale import Stale
from .states import Event as Move
from .takeover import Requests

__all__ = ["Executor"]

T = TypeVar("T")


class Executor(Part):
    def __init__(self, core: Core, snaps: Snapshots, setpoints: Setpoints,
                 requests: Requests, runs: Runs, safety: Safety,
                 interlocks: Interlocks, leases: Leases) -> None:
        super().__init__(core)
        self.snaps = snaps
        self.setpoints = setpoints
        self.requests = requests
        self.runs = runs
        self.safety = safety
        self.interlocks = interlocks
        self.leases = leases
        self.checks = Rechecks(core, snaps, setpoints, runs, interlocks)
        self.sender = Sender(snaps, interlocks)
        self.stale = Stale(core, snaps, requests, runs)
        self.conclusions = Conclusions(core, snaps, setpoints, requests, safety, leases)
        self._in_flight: set[str] = set()
        #: Executions here that ended in a store error: one left ``executing`` is judged
        #: from a read-back once the store answers (reconcile_orphans), never re-sent.
        self._unrecorded: set[str] = set()
        #: One execution at a time per instrument, from the recheck to the read-back (the
        #: recheck and the write share one lane turn; the moves recorded around it belong to
        #: one request at a time). An asyncio lock: a waiting execution holds no thread.
        self._executing: dict[str, asyncio.Lock] = {}
        #: Turns an approved plan request into a live plan (set by the plans part).
        self.activate_plan: Callable[[TakeoverRequest], TakeoverRequest] | None = None
        #: Whether a run's client is known to be there since the last start (set by the
        #: gateway: ``Terms.confirmed``); an approved request of one that is not waits.
        self.confirmed: Callable[[str], bool] = lambda run_id: True
        #: Keeps a run's selection read after a recall (set by the intake: run, instrument,
        #: the channel the instrument has selected now).
        self.reselect: Callable[[str, Instrument, int], None] | None = None

    def in_flight(self, request_id: str) -> bool:
        return request_id in self._in_flight

    async def run_approved(self) -> None:
        """Execute approved requests this bench owns that nobody is executing: after a
        restart, and as the fallback when a notification from another gateway was lost.
        None once fenced (another gateway took the bench): they are the new owner's to run."""
        if self.core.registry.lost is not None:
            return
        for req in self.store.list_requests(status=Status.APPROVED, limit=10_000):
            if self.core.owns(req) and req.id not in self._in_flight and not req.on_resend:
                self.core.spawn(self.execute(req.id))

    async def execute(self, request_id: str, *, resent: bool = False) -> TakeoverRequest:
        """Run an approved request. One that runs on its requester's resend (``on_resend``)
        runs only with ``resent`` (``Intake.resent`` matched the resend): never at its last
        approval, at a restart, or on another gateway's word."""
        if request_id in self._in_flight:
            return await self.requests.wait(request_id, timeout=30, follow=False)
        self._in_flight.add(request_id)

        async def owned() -> TakeoverRequest:
            try:
                return await self._execute_owned(request_id, resent)
            except StoreError:
                self._unrecorded.add(request_id)  # its end may be unkept: reconcile_orphans
                raise
            finally:
                self._in_flight.discard(request_id)
        return await self._to_the_end(owned())

    async def _to_the_end(self, work: Coroutine[Any, Any, T]) -> T:
        """Run an execution to its end in a task of its own, whatever happens to its caller
        (an MCP call cancelled, a session ending): the lane job of a started write runs to
        its end anyway (instruments.Lane), so what follows it (the judged read-back, the
        receipt, the lease on what it switched on, the setpoint remembered) must too, or a
        written request stays ``executing`` with no lease, and a lost client leaves the DUT
        energized. Gateway.close waits for it."""
        return await asyncio.shield(self.core.spawn(work))

    async def _execute_owned(self, request_id: str, resent: bool) -> TakeoverRequest:
        req = self.requests.get(request_id)
        if req.status is not Status.APPROVED or not self.core.owns(req):
            return req
        if req.on_resend and not resent:
            return req  # it waits, approved, for its requester's resend
        if not self.confirmed(req.run_id):
            # Invariant 6 across a restart: it waits, approved, until its client is heard
            # again (or its run closes a term later, cancelling it): bench_gate/terms.py.
            return req
        # A plan's activation expires like any grant (invariant 5): activated before the
        # expiry check, an expired plan request went live when its bench came back. (Its
        # scope's own binding is checked by the plans part, each plan write on its own.)
        plan = req.plan_id is not None and all(a.effect == "plan" for a in req.actions)
        try:
            refusal = self.checks.withdrawn_refusal(req)  # a plan's approvals too
            if refusal is None and not plan:
                self.interlocks.check(req.instrument)
                refusal = self.checks.unfit_to_run(req) or self.checks.policy_refusal(req)
        except Refused as exc:
            refusal = exc.message
        if refusal is None and req.expires_at <= self.clock():
            self.requests.move(req, Move.EXPIRE, EventType.TAKEOVER_EXPIRED,
                               {"expires_at": req.expires_at.isoformat()},
                               outcome="expired before it could run (its bench was away); nothing "
                                       "was written")
            return req
        refusal = refusal or self.checks.unjournaled(req)  # a row edited behind our back
        if refusal is not None:
            self.requests.move(req, Move.FAIL, EventType.STEP_FAILED, {"reason": refusal},
                               outcome=f"failed: {refusal}; nothing was written")
            return req
        if plan:
            assert self.activate_plan is not None, "a plan request needs the plans part"
            return self.activate_plan(req)
        lock = self._executing.setdefault(req.instrument, asyncio.Lock())
        async with lock:
            return await self._recheck_and_write(req)

    def may_run_granted(self, req: TakeoverRequest, fresh: list[Approval]) -> bool:
        """``req``, with its last approval, may go :meth:`run_granted`'s short way: nothing
        refuses it, and its instrument is free (a grant while another write runs is
        recorded at once, as before). Else it is recorded approved and goes the long way.
        ``fresh``: the approvals this grant gives, journaled with its commit; every other
        one must be in the journal already (else the long way refuses it)."""
        lock = self._executing.get(req.instrument)
        if (req.on_resend or not self.core.owns(req) or req.id in self._in_flight
                or not self.confirmed(req.run_id)
                or (lock is not None and lock.locked()) or req.expires_at <= self.clock()
                or (req.plan_id is not None and all(a.effect == "plan" for a in req.actions))):
            return False
        try:
            self.interlocks.check(req.instrument)
            earlier = [a for a in req.valid_approvals() if not any(a is f for f in fresh)]
            return not (self.checks.unfit_to_run(req) or self.checks.policy_refusal(req)
                        or self.checks.unjournaled(req, earlier))
        except Refused:
            return False

    async def run_granted(self, req: TakeoverRequest, version: int, events: list[Event]
                          ) -> TakeoverRequest | None:
        """The last approval (``events``) and the start in one transaction, the live recheck
        (a change: ``executing`` -> ``stale``), then the write: one durable commit before the
        write, not two. None, nothing recorded and nothing written, if ``req`` moved since
        ``version``. Awaited right after ``may_run_granted``: the free lock is taken at once.

        The commit (its fsync) runs on a worker thread while the lane re-reads the live
        state, and the write follows in the same lane turn: reads change nothing, nothing is
        judged or written until the commit is durable (the request is ``executing`` before
        its write), and no other job reaches the instrument between the recheck and the
        write. A crash after the commit leaves it ``executing``: a restart judges it from a
        read-back, never re-sends it (reconcile_interrupted); before it, nothing is kept.
        It runs to its end whatever happens to its caller (:meth:`_to_the_end`)."""
        self._in_flight.add(req.id)
        lock = self._executing.setdefault(req.instrument, asyncio.Lock())
        try:
            await lock.acquire()  # free (may_run_granted): taken at once, nothing awaited
        except BaseException:
            self._in_flight.discard(req.id)
            raise
        return await self._to_the_end(self._run_granted(req, version, events, lock))

    async def _run_granted(self, req: TakeoverRequest, version: int, events: list[Event],
                           lock: asyncio.Lock) -> TakeoverRequest | None:
        try:
            req.status = Status.EXECUTING  # approve, then start: both in states.py
            extra = {"plan_id": req.plan_id} if req.plan_id else {}
            started = Event(run_id=req.run_id, request_id=req.id,
                            type=EventType.STEP_STARTED,
                            data={"commands": [a.canonical for a in req.actions],
                                  "status": req.status.value, **extra})
            inst = self.core.instrument(req.instrument)
            fields = self.snaps.fields(inst, req.actions)
            saving = asyncio.ensure_future(asyncio.to_thread(
                self.store.save_request, req, version, [*events, started]))
            refused: list[Refusal | None] = []

            async def committed() -> bool:
                if not await saving:
                    return False  # it moved meanwhile
                self.core.notifier.request_changed(req)
                for listener in self.requests.listeners:
                    listener(req, req.status)
                return True

            async def recheck(link: AsyncLink) -> bool:
                why = await self.checks.judged(link, inst, req, fields, committed)
                if why is False:
                    return False
                refused.append(why)
                return why is None

            try:
                done = await self._write(req, inst, fields, recheck)
            finally:
                if not saving.done():  # the lane failed before it awaited the commit
                    await asyncio.wait([saving])
            if done is not None:
                return done
            if not refused:
                return None  # it moved meanwhile: nothing recorded, nothing written
            why = refused[-1]
            assert why is not None
            await self.stale.record(why, req, inst)
            return self.requests.get(req.id)
        except StoreError:
            self._unrecorded.add(req.id)  # its end may be unkept: reconcile_orphans
            raise
        finally:
            lock.release()
            self._in_flight.discard(req.id)

    async def _recheck_and_write(self, req: TakeoverRequest) -> TakeoverRequest:
        """The long way: the live recheck, the start (``approved`` -> ``executing``) and the
        write, all on one lane turn, so no other job reaches the instrument in between."""
        req = self.requests.get(req.id)  # it may have moved while this waited for the lock
        if req.status is not Status.APPROVED:
            return req
        inst = self.core.instrument(req.instrument)
        fields = self.snaps.fields(inst, req.actions)
        refused: list[Refusal] = []

        async def recheck(link: AsyncLink) -> bool:
            why = await self.checks.judged(link, inst, req, fields)
            if why is not None:
                assert why is not False  # without a commit to wait for: never "moved"
                refused.append(why)
                return False
            return self.requests.move(req, Move.START, EventType.STEP_STARTED,
                                      {"commands": [a.canonical for a in req.actions]})

        done = await self._write(req, inst, fields, recheck)
        if done is None and refused:
            await self.stale.record(refused[0], req, inst)
        return done or self.requests.get(req.id)

    async def _write(self, req: TakeoverRequest, inst: Instrument,
                     fields: list[tuple[int | None, str]],
                     recheck: Callable[[AsyncLink], Awaitable[bool]] | None = None
                     ) -> TakeoverRequest | None:
        """Write, read back, judge. With ``recheck``, it runs first on the same lane turn,
        and nothing is sent (None) unless it says go."""
        started = self.clock()
        commands = [a.canonical for a in req.actions]
        profile = inst.profile
        limits = self.config.envelope.get(inst.config.name, {})
        # Read back every field the write touched, and every enveloped field of every
        # channel: the effect of a command may reach further than the profile predicts.
        readback = list(dict.fromkeys([*fields, *envelope.readable_fields(profile, limits)]))
        # A reading approved without the words "excites" measures with the function set now:
        # asked on this turn (the panel may have changed it since); exciting, nothing runs.
        spec = profile.model.excitation
        unshown = spec is not None and any(a.effect != "excites" and measures_now(
            profile, a.canonical) for a in req.actions)
        found: list[str] = []
        # A recall restores the instrument's own selection (the E3631A's *RCL): what a bare
        # unit of the run means next is read on this turn, after the write.
        recalls = profile.model.addressing is not None and profile.model.addressing.query \
            is not None and any((f := profile.form_of(a.canonical)) is not None
                                and f.reselects == "recalled" for a in req.actions)
        reselected: list[int] = []
        lines: list[SentLine] = []  # what the instrument got, in order, and what it did not

        async def job(link: AsyncLink) -> Written | None:
            # The recheck and the writes on one connection: the recheck stands for the
            # one it was read on (a lost one is not replaced: Lane.one_connection).
            with inst.lane.one_connection():
                if recheck is not None and not await recheck(link):
                    return None
                out = Written()
                if spec is not None and unshown:
                    applies = await excitation_now(spec, link.query)
                    if applies is not None:
                        found.append(applies)
                        return out  # nothing written, nothing to read back
                await self.sender.send(link, inst, req, out, lines)
            if recalls and (now_selected := await read_selection(link, inst)) is not None:
                reselected.append(now_selected)
            # Read back whatever happened; never retry the write blindly. Only the instrument
            # that was judged may answer: another one's values say nothing about ours.
            out.after, out.read_error = await self.safety.read_back(link, inst, readback,
                                                                    req.snapshot.idn)
            out.instrument_errors = await self.safety.drain_errors(link, inst)
            if out.instrument_errors and out.stored:  # a save it may have refused: unknown
                for key in out.stored:
                    self.snaps.memories.before(inst, ("save", key), req.snapshot.idn)
                out.stored.clear()
            out.safed = await self.safety.make_safe(link, inst, out.after)
            return out

        try:
            w = await inst.lane.run(job)
        except WrongInstrument as exc:  # the lane's *IDN?, before the job: nothing sent
            if recheck is None or await recheck(Refusing(exc)):  # it refuses, recorded
                raise
            return None
        if w is None:
            return None
        if reselected and self.reselect is not None:
            self.reselect(req.run_id, inst, reselected[0])
        if found:
            return await self.stale.go_stale(req, inst, {"measure function": (
                "not shown as exciting", f"excites: {found[0]}")}, excites=found[0])
        receipt = Receipt(sent=[ln.text for ln in lines if ln.sent], lines=lines,
                          before=req.snapshot.values, after=w.after or {},
                          approvals=req.valid_approvals(), started_at=started,
                          finished_at=self.clock(), stored=w.stored,
                          detail=";".join(w.answers[i] for i in sorted(w.answers)))
        judged = judge_readback(
            before=req.snapshot.values,
            expected=self.snaps.proposed(req.actions, req.snapshot, inst.profile),
            after=w.after, unverifiable=unverifiable(req.actions),
            blind=any(a.unpredictable for a in req.actions), error=w.error,
            instrument_errors=w.instrument_errors, read_error=w.read_error)
        try:
            self.conclusions.conclude(req, inst, receipt, judged, w.safed, w.after,
                                      executed="executed: " + "; ".join(commands))
        except StoreError as exc:  # not "nothing was acknowledged": the write went out
            raise StoreError(f"{req.id}: the write went out, but the store did not record "
                             f"its outcome ({exc.message}); it is judged from a read-back "
                             "once the store is back, and never sent again") from exc
        return req

    async def reconcile_interrupted(self, req: TakeoverRequest) -> None:
        """A write was in flight when the gateway stopped: read back, never re-send."""
        await self.conclusions.reconcile_interrupted(req)

    def reconcile_orphans(self) -> None:
        """Each sweep: an execution here that ended in a store error (its write went out,
        then the store failed its outcome's commit; or its start's commit was never
        confirmed) and left its request ``executing`` is judged from a read-back once the
        store answers, as after a crash; never re-sent. None once fenced: the bench's
        requests are the new owner's (its start reconciles them)."""
        if self.core.registry.lost is not None:
            return
        for request_id in sorted(self._unrecorded - self._in_flight):
            self._in_flight.add(request_id)
            self.core.spawn(self._reconcile_orphan(request_id))

    async def _reconcile_orphan(self, request_id: str) -> None:
        try:
            lock = self._executing.setdefault(
                self.requests.get(request_id).instrument, asyncio.Lock())
            async with lock:  # after the write in progress on its instrument, if any
                req = self.requests.get(request_id)
                if req.status is Status.EXECUTING and self.core.owns(req):
                    await self.conclusions.reconcile_interrupted(
                        req, "the store's failure to record its outcome")
            self._unrecorded.discard(request_id)
        except NotFound:
            self._unrecorded.discard(request_id)
        except GatewayError:
            pass  # the store (or the instrument) is away again: the next sweep judges it
        finally:
            self._in_flight.discard(request_id)
