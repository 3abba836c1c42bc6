"""The checks again just before a write: the approvals bound to exactly this proposal
(invariant 3), the owner's rules now, and, on the instrument's lane, the live state against
what the approver saw and the envelope on it ("nothing runs on stale approval"). Each
answers why not, or None; the executor records the answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from . import envelope
from .approvals import Grant, violation, withdrawn, withdrawn_words
from .auth import revoked_tokens
from .core import Core, Instrument, Part
from .errors import InstrumentError, Refused, WrongInstrument
from .instruments import AsyncLink
from .interlocks import Interlocks
from .lockstep import in_step
from .memories import SAVED_AT
from .models import (
    Approval,
    ApprovalKind,
    EventType,
    Run,
    RunStatus,
    Snapshot,
    TakeoverRequest,
    proposal_hash,
)
from .runs import Runs
from .setpoints import Setpoints
from .snapshots import Snapshots
from .states import Event as Move
from .store import intact
from .wire import rfc3339

__all__ = ["Rechecks", "Refusal"]


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the live recheck stops a write: fail it (``reason``, ``outcome``), or send it
    back stale with ``diff`` (``move`` is ``GO_STALE``)."""

    move: Move
    reason: str
    outcome: str
    diff: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)


class Rechecks(Part):
    def __init__(self, core: Core, snaps: Snapshots, setpoints: Setpoints, runs: Runs,
                 interlocks: Interlocks) -> None:
        super().__init__(core)
        self.snaps = snaps
        self.setpoints = setpoints
        self.runs = runs
        self.interlocks = interlocks

    def refusal(self, req: TakeoverRequest, inst: Instrument,
                live: Snapshot | InstrumentError) -> Refusal | None:
        """Why the write may not go on its lane turn, the live state read; None: it goes."""
        return (self.closed_refusal(req) or self.last_moment(req)
                or self.live_refusal(req, inst, live) or self.stop_refusal(req))

    def stop_refusal(self, req: TakeoverRequest) -> Refusal | None:
        """An emergency stop since the grant: the lane turn ends before any command, so the
        stop's own safe action runs next, waiting for no read-back."""
        try:
            self.interlocks.check(req.instrument)
        except Refused as exc:
            return Refusal(Move.FAIL, exc.message, f"failed: {exc.message}")
        return None

    def policy_refusal(self, req: TakeoverRequest) -> str | None:
        """The owner's own rules, checked again just before it executes: a decision made on
        another gateway, or before a restart or a config change, never skips them."""
        run = self.runs.get(req.run_id)
        gone = self._run_refusal(req, run) or self.withdrawn_refusal(req, run)
        if gone is not None:
            return gone
        if req.plan_id is not None and req.handoff.get("auto_step"):
            return self._plan_refusal(req, run)
        grants = [Grant(a.kind, a.by) for a in req.valid_approvals()]
        why = violation(req, run, self.config.policy, grants, self.setpoints.people_in_force(req))
        if why is None:
            inst = self.core.instrument(req.instrument)
            limits = self.config.envelope.get(req.instrument, {})
            found = envelope.action_breaches(inst.profile, limits, req.actions)
            why = envelope.summary(inst.profile, found) if found else None
        return f"this bench's rules refuse it now: {why}" if why else None

    @staticmethod
    def _run_refusal(req: TakeoverRequest, run: Run) -> str | None:
        """A closed run (its requester gone or done) runs nothing; a suspended one runs
        nothing a person approved until an operator releases it."""
        if run.status is RunStatus.CLOSED:
            return "its run is closed: nothing more runs in it"
        if run.status is RunStatus.SUSPENDED and not (
                req.plan_id is not None and req.handoff.get("auto_step")):
            return "its run is suspended; an operator must release it"
        return None

    def last_moment(self, req: TakeoverRequest) -> Refusal | None:
        """Checked again on the write's own lane turn, before any command: the write may
        have waited there (behind another write, a slow read) past its expiry (an expiry
        is a denial), past the end of its run (a gone client's request never runs; the
        grant had already made it ``executing``, which closing a run leaves alone), or past
        the revocation of a token one of its approvals was given with."""
        if req.expires_at <= self.clock():
            when = rfc3339(req.expires_at)
            return Refusal(Move.EXPIRE, f"expired at {when} while it waited for the "
                           "instrument", f"expired: its time ran out at {when} while it "
                           "waited for the instrument; nothing was written")
        run = self.runs.get(req.run_id)
        why = self._run_refusal(req, run)
        if why is not None:
            return Refusal(Move.FAIL, why, f"failed: {why} (it ended while the write waited "
                           "for the instrument); nothing was written")
        # A token revoked while the write waited here (behind another write, a slow read):
        # the checks before the lane turn passed, but its approvals no longer count.
        why = self.withdrawn_refusal(req, run)
        if why is not None:
            return Refusal(Move.FAIL, why, f"failed: {why} (revoked while the write waited "
                           "for the instrument); nothing was written")
        return None

    def _plan_refusal(self, req: TakeoverRequest, run: Run) -> str | None:
        """A write inside a plan runs only while the plan is live, and only while the
        plan's own approvals still stand under this bench's rules now (a plan approved
        under looser rules, before a restart or a config change, stops counting)."""
        assert req.plan_id is not None
        raw = self.store.kv_get("plans", req.plan_id) or {}
        if raw.get("status") not in ("active", "exhausted"):
            return f"its plan {req.plan_id} is {raw.get('status', 'gone')}"
        approved = self.store.get_request(str(raw.get("request_id", "")))
        if approved is None:
            return f"the request that approved plan {req.plan_id} is gone"
        if approved.bench not in ("", req.bench) or approved.instrument != req.instrument:
            # Instrument names are per bench: a plan approved for bench A's psu says
            # nothing about bench B's psu, another instrument on another DUT.
            return (f"its plan {req.plan_id} was approved for {approved.instrument} on bench "
                    f"{approved.bench!r}, not {req.instrument} on bench {req.bench!r}")
        gone = self.withdrawn_refusal(approved) or self.unjournaled(approved)
        if gone is not None:
            return f"its plan {req.plan_id} no longer stands: {gone}"
        grants = [Grant(a.kind, a.by) for a in approved.valid_approvals()]
        why = violation(approved, run, self.config.policy, grants, {})
        return f"this bench's rules refuse its plan now: {why}" if why else None


    def withdrawn_refusal(self, req: TakeoverRequest, run: Run | None = None) -> str | None:
        """Invariant 3 at the last moment: an approval given with a token revoked since
        (through any door: the CLI on the store, another gateway) no longer counts, whether
        it waited for a second approval, a resend, or its bench. With ``run`` (its run),
        nothing runs for a requester whose token was revoked since either: the sweep closes
        such a run within ``SWEEP_SECONDS``, and a door trusts a verified token a moment
        longer, so a write its plan covered ran unattended for the revoked token."""
        revoked = revoked_tokens(self.store)
        if run is not None and run.token and run.token in revoked:
            return (f"the token {run.token} its run {run.id} was made with was revoked: "
                    "nothing more runs in it")
        gone = withdrawn(req.valid_approvals(), revoked, self.store)
        if gone:
            return (f"{withdrawn_words(gone)} no longer counts: the token it was given with "
                    "was revoked")
        # The setpoint in force it stands on (its cover) is an approval it runs on too.
        lost = self.setpoints.revoked_cover(req)
        if lost:
            chs = ", ".join(f"CH{ch}" for ch in sorted(lost))
            return (f"the setpoint in force on {chs} it stood on no longer counts: the token "
                    "it was approved with was revoked")
        return None

    async def judged(self, link: AsyncLink, inst: Instrument, req: TakeoverRequest,
                     fields: list[tuple[int | None, str]],
                     first: Callable[[], Awaitable[bool]] | None = None
                     ) -> Refusal | Literal[False] | None:
        """The live state of ``fields`` read on the lane's turn, and why the write may not
        go on it (:meth:`refusal`; None: it goes). It is judged while the sync point's
        ``*IDN?`` is on the wire (lockstep.py); a state out of step is judged as the error
        it is. ``first`` (the write's commit) is awaited before judging: False, it moved."""
        try:
            state = await self.snaps.read_state(link, inst, fields)
        except InstrumentError as exc:
            return False if first is not None and not await first() else \
                self.refusal(req, inst, exc)
        sync = asyncio.ensure_future(in_step(link, inst, state.idn))
        await asyncio.sleep(0)  # its query leaves; the answer comes while this judges
        try:
            if first is not None and not await first():
                return False
            why = self.refusal(req, inst, state)
        finally:
            try:
                await sync  # the answers were to these queries, or nothing acts on them
            except InstrumentError as exc:
                why = self.refusal(req, inst, exc)
        return why

    def live_refusal(self, req: TakeoverRequest, inst: Instrument,
                 live: Snapshot | InstrumentError) -> Refusal | None:
        """None if the write may go: the live state was read, is what the approver saw, and
        is inside the envelope as configured now. Else why not, to be recorded."""
        if isinstance(live, WrongInstrument):  # a profile judges only its own instrument
            return Refusal(Move.FAIL, live.message, f"failed: at the live recheck: "
                           f"{live.message}; nothing was written")
        if isinstance(live, InstrumentError):
            return Refusal(Move.FAIL, live.message,
                           f"failed: could not re-read the instrument before writing "
                           f"({live.message}); nothing was written")
        diff = req.snapshot.diff(live)
        if not diff:
            stuck = [a.channel for a in req.actions
                     if a.approval is ApprovalKind.OUTPUT_ENABLE and a.channel is not None
                     and ApprovalKind.SETPOINT not in req.approved_kinds()
                     and not self.setpoints.still_approved(inst, a.channel, live)]
            if stuck:
                diff = {f"ch{c}.approved_setpoint": ("approved", "changed") for c in stuck}
        # A stored state it recalls, saved again (or dropped) since it was shown.
        recalled = self.snaps.memories.recalled(inst, (a.canonical for a in req.actions),
                                                live.idn)
        for key in sorted(set(recalled) | set(req.snapshot.recalled)):
            was, now = req.snapshot.recalled.get(key), recalled.get(key)
            if was != now:
                diff[f"{key} (stored state)"] = (
                    f"saved {was[SAVED_AT]}" if was else None,
                    f"saved {now[SAVED_AT]}" if now else None)
        if diff:
            return Refusal(Move.GO_STALE, "", "", diff)
        live = live.model_copy(update={"recalled": recalled})
        try:  # the envelope as it is configured now, on the live state
            self.snaps.check_envelope(inst, req.actions, live)
        except Refused as exc:
            return Refusal(Move.FAIL, exc.message,
                           f"failed: refused at the live recheck: {exc.message}")
        return None

    def closed_refusal(self, req: TakeoverRequest) -> Refusal | None:
        """A run closed while its write waited for the lane (its client gone): closing
        cancels what is undecided, not a request already ``executing``, so the lane turn
        asks again (in memory: closed through this gateway, where its doors are)."""
        if not self.runs.is_closed(req.run_id):
            return None
        why = "its run closed while it waited for the instrument"
        return Refusal(Move.FAIL, why, f"failed: {why}; nothing was written")

    def unjournaled(self, req: TakeoverRequest,
                    approvals: list[Approval] | None = None) -> str | None:
        """Invariant 3 against the store's own rows: an approval counts only if the journal
        holds it (its ``approval_granted`` event for this request, of its kind, by its
        approver, for this proposal hash, the row's own hash intact). A request row edited
        behind the gateway's back (an approval, an ``approved`` status, a changed proposal
        with its hash recomputed) runs nothing: ``journal verify`` cannot see such an edit
        (the requests table is no part of the chain). A plan's step is approved by its plan
        (its event names the step's hash; one journaled before that, none), its plan by a
        request checked the same way."""
        wanted = req.valid_approvals() if approvals is None else approvals
        if not wanted:
            return None
        step = req.plan_id is not None and bool(req.handoff.get("auto_step"))
        held: set[tuple[str, str, str | None]] = set()
        for ev in self.store.request_events(req.id, EventType.APPROVAL_GRANTED.value, 1000):
            if not intact(ev):
                continue  # an edited row proves nothing
            kinds = [ev.data["kind"]] if "kind" in ev.data else ev.data.get("kinds") or []
            shown = ev.data.get("proposal_hash")
            for kind in kinds:  # a step's names its hash (one journaled before, none)
                held.add((str(kind), str(ev.data.get("by")),
                          None if step and shown is None else str(shown)))
        missing = [a for a in wanted if (a.kind.value, a.by, a.proposal_hash) not in held
                   and not (step and (a.kind.value, a.by, None) in held)]
        if missing and self.store.segments() and not self._begun_in_store(req):
            # [journal] keep_days archived the oldest events; with its own start archived
            # too, an approval older than the store's oldest event went with them (its time
            # is the row's word: one whose start is in the store has every approval there)
            first = self.store.chain(0, 1)  # the oldest event still in the store
            since = datetime.fromisoformat(str(first[0][4])) if first else None
            if since is not None and since.tzinfo is None:
                since = since.replace(tzinfo=UTC)
            missing = [a for a in missing if since is None or a.at >= since]
        if not missing:
            return None
        return ("its approval (" + ", ".join(f"{a.kind.value} by {a.by}" for a in missing)
                + ") is not in the journal: the store was changed behind the gateway's back")

    def _begun_in_store(self, req: TakeoverRequest) -> bool:
        """Whether the request's own start (its ``takeover_requested`` event) is still in
        the store: nothing of it was archived, then."""
        return bool(self.store.request_events(req.id, EventType.TAKEOVER_REQUESTED.value, 1))

    @staticmethod
    def unfit_to_run(req: TakeoverRequest) -> str | None:
        """Invariant 3, checked again at the last moment: the approvals are bound to exactly
        this proposal (its commands and the snapshot shown), and none is missing."""
        commands = [a.canonical for a in req.actions]
        # Bound to the request (one held before hashes named it: its content alone).
        expected = {proposal_hash(req.instrument, commands, req.snapshot, req.revision,
                                  request=req.id),
                    proposal_hash(req.instrument, commands, req.snapshot, req.revision)}
        if req.proposal_hash not in expected:
            return "the proposal does not match its hash"
        if req.missing():
            return "approvals missing for this exact proposal: " + ", ".join(
                k.value for k in req.missing())
        return None

