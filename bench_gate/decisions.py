"""Decisions: a person grants some approval kinds of exactly the proposal they were shown,
optionally with edits (a new proposal), denies it with a note, or a requester withdraws
it. Who may approve what is ``approvals.violation``; when nothing is missing, the executor
takes over. Expiry, the decision nobody made, is here too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .approvals import Grant, person, require_operator, violation, withdrawn
from .auth import refuse_revoked, refuse_token, revoked_tokens
from .config import ChannelLimits
from .core import MAX_RETRIES, Core, Part
from .errors import InvalidInput, PermissionDenied, ProposalChanged, TransitionError
from .executor import Executor
from .federation import Rules
from .handoff import build_handoff, describe
from .models import (
    Approval,
    ApprovalKind,
    Event,
    EventType,
    Principal,
    Run,
    RunKind,
    Status,
    TakeoverRequest,
    proposal_hash,
)
from .policy import envelope_breach
from .runs import Runs
from .scpi import Profile, ScpiError, classify, render_value
from .setpoints import Setpoints
from .snapshots import Snapshots
from .states import Event as Move
from .takeover import Requests
from .wire import rfc3339

__all__ = ["EDITED_SHOWN", "Decisions", "GrantResult"]

#: The parts of a handoff made from its actions: an edit makes them again.
EDITED_SHOWN = ("actions", "reversibility", "risk", "proposed", "diff", "diff_words")


@dataclass(slots=True)
class GrantResult:
    request: TakeoverRequest
    missing: list[ApprovalKind] = field(default_factory=list)
    message: str = ""



class Decisions(Part):
    def __init__(self, core: Core, snaps: Snapshots, setpoints: Setpoints,
                 requests: Requests, runs: Runs, executor: Executor) -> None:
        super().__init__(core)
        self.snaps = snaps
        self.setpoints = setpoints
        self.requests = requests
        self.runs = runs
        self.executor = executor
        self.metrics: dict[str, float] = {"decisions": 0, "decision_seconds": 0.0}
        #: The revoked tokens the last withdraw_revoked saw (it acts on new ones only).
        self._revoked_seen: frozenset[str] = frozenset()

    async def expire_due(self) -> int:
        """Expire every pending request whose time is up (an expiry is a denial)."""
        count = 0
        now = self.clock()
        for req in self.store.due_for_expiry(now.isoformat()):
            if self.requests.move(req, Move.EXPIRE, EventType.TAKEOVER_EXPIRED,
                                  {"expires_at": req.expires_at.isoformat()},
                                  outcome="expired: no decision before "
                                          f"{rfc3339(req.expires_at)}; nothing was written"):
                count += 1
                self._suspended(req, self.runs.after_denial(req, "expired"))
        for req in self.store.list_requests(status=Status.APPROVED, limit=10_000):
            if req.on_resend and req.expires_at <= now:  # approved, never resent in time
                count += self.requests.expire_unsent(req)
        return count

    def _check_approver(self, req: TakeoverRequest, run: Run, who: Principal,
                        kinds: list[ApprovalKind]) -> None:
        require_operator(who)
        grants = [Grant(a.kind, a.by) for a in req.valid_approvals()] + [
            Grant(k, who.name) for k in kinds]
        why = violation(req, run, self.rules(req)[0], grants, self.setpoints.people_in_force(req))
        if why is not None:
            raise PermissionDenied(why)
        if person(who.name) == person(run.principal) and len(kinds) != 1:
            raise InvalidInput("approving your own change confirms one approval kind at "
                               "a time: confirm setpoint and output enable separately")

    def rules(self, req: TakeoverRequest) -> Rules:
        """The policy and envelope a request is decided by: its owner's, published through
        the shared store when another bench owns it (the owner checks them again anyway)."""
        if not self.core.owns(req):
            published = self.core.registry.rules(req.bench)
            if published is not None:
                return published
        return self.config.policy, self.config.envelope

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
            req = self.requests.get(request_id)
            run = self.runs.get(req.run_id)
            if req.status is Status.PENDING and req.expires_at <= self.clock():
                await self.expire_due()
                req = self.requests.get(request_id)
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
            version = req.version
            events = self._withdraw_revoked(req, approver)
            require_operator(approver)  # before anything moves on a caller's word
            if await self._uncovered(req):
                gone_stale = self.requests.get(req.id)
                return GrantResult(gone_stale, [], gone_stale.outcome or "")
            if edits:  # first: the rules judge the approvals that stand after the edit
                events.extend(self._apply_edits(req, edits, approver))
            self._check_approver(req, run, approver, wanted)
            fresh: list[Approval] = []
            for kind in wanted:
                if kind in req.approved_kinds():
                    continue
                tokens = [approver.token] if approver.token else []
                fresh.append(Approval(kind=kind, by=approver.name, notes=notes,
                                      proposal_hash=req.proposal_hash, tokens=tokens))
                req.approvals.append(fresh[-1])
                events.append(Event(run_id=req.run_id, request_id=req.id,
                                    type=EventType.APPROVAL_GRANTED,
                                    data={"kind": kind.value, "by": approver.name,
                                          "notes": notes, "proposal_hash": req.proposal_hash,
                                          "tokens": tokens}))
            complete = not req.missing()
            if complete and self.executor.may_run_granted(req, fresh):
                # The approval and the start in one durable commit, then recheck and write.
                final = await self.executor.run_granted(req, version, events)
                if final is None:
                    continue  # it changed meanwhile: decide on it as it is now
                self._record_decision(final)
                return GrantResult(final, [], final.outcome or "")
            if complete:
                req.status = Status.APPROVED
            if self.store.save_request(req, version, events):
                break
        else:
            raise TransitionError(request_id, "busy", "grant", "too many concurrent changes")
        self.core.notifier.request_changed(req)
        if not complete:
            return GrantResult(req, req.missing(), self.requests.missing_message(req))
        self._record_decision(req)
        if req.on_resend:  # the socket door's on_hold = refuse: its requester resends it
            return GrantResult(req, [], "approved; it runs when its requester resends the "
                               f"same command before {rfc3339(req.expires_at)}")
        if not self.core.owns(req):
            # Another bench owns the instrument: it rechecks and executes (told through the
            # store). While it is alive, wait a little for its outcome so the approver sees
            # it; while it is down, the grant is recorded at once and runs when it is back.
            if not self.core.registry.alive(req.bench):
                return GrantResult(req, [], f"approved; bench {req.bench!r} is not running: it "
                                   "executes it after its live recheck when it is back, if "
                                   "that is before the request expires")
            final = await self.requests.wait(req.id, timeout=5, follow=False)
            message = final.outcome or (f"approved; bench {req.bench!r} executes it after its "
                                        "live recheck")
            return GrantResult(final, [], message)
        final = await self.executor.execute(req.id)
        return GrantResult(final, [], final.outcome or "")

    async def withdraw_revoked(self) -> int:
        """Take the approvals given with a token revoked since (anywhere: the CLI on the
        store, another gateway) off every pending request, journaled, so what people are
        shown counts only what stands; returns how many. An approved request not yet
        started (waiting for its requester's resend, or its bench) fails now, nothing
        written, rather than showing ``approved`` until then. Runs with the sweep, and
        reads the requests only when a revocation is new. (One already executing is
        refused on its lane turn; a plan ends when next read.)"""
        revoked = revoked_tokens(self.store)
        new = revoked - self._revoked_seen
        if not new:
            return 0
        self.runs.close_revoked(new)  # first: their undecided requests are cancelled
        count = 0
        for req in self.store.list_requests(status=Status.APPROVED, limit=10_000):
            why = self.executor.checks.withdrawn_refusal(req)  # its cover's too
            if why is None:
                continue
            gone = withdrawn(req.valid_approvals(), revoked, self.store)
            if self.requests.move(req, Move.FAIL, EventType.STEP_FAILED, {"reason": why},
                                  outcome=f"failed: {why}; nothing was written",
                                  only_from=Status.APPROVED):
                self.store.append(self._withdrawn_events(req, gone))
                count += len(gone)
        for req in self.store.list_requests(status=Status.PENDING, limit=10_000):
            if await self._uncovered(req):
                continue
            for _ in range(MAX_RETRIES):
                version = req.version
                gone = withdrawn(req.approvals, new, self.store)
                if not gone:
                    break
                req.approvals = [a for a in req.approvals if a not in gone]
                if self.store.save_request(req, version, self._withdrawn_events(req, gone)):
                    count += len(gone)
                    self.core.notifier.request_changed(req)
                    break
                req = self.requests.get(req.id)  # it changed meanwhile: look again
        self._revoked_seen = revoked  # only once done: a store that failed meanwhile retries
        return count

    def _withdraw_revoked(self, req: TakeoverRequest, approver: Principal) -> list[Event]:
        """Approvals given with a token revoked since leave ``req`` (journaled), so the
        grant counts only what still stands; an approver whose own token was revoked (a
        verified token is trusted a moment without a lookup) decides nothing."""
        revoked = revoked_tokens(self.store)  # one read of the tokens for both
        refuse_revoked(self.store, approver, revoked)
        gone = withdrawn(req.approvals, revoked, self.store)
        req.approvals = [a for a in req.approvals if a not in gone]
        return self._withdrawn_events(req, gone)

    async def _uncovered(self, req: TakeoverRequest) -> bool:
        """An output enable shown standing on a setpoint in force (its cover) approved with
        a token revoked since: that setpoint is nobody's now, and what its approvers were
        shown no longer holds. It goes back for review (``stale``) with a fresh request on
        the live state, which asks for a setpoint approval of its own, as it would if filed
        now; nobody's approval binds to a proposal they were not shown. True if it went."""
        lost = self.setpoints.revoked_cover(req) if self.core.owns(req) else {}
        if not lost:
            return False
        inst = self.core.instrument(req.instrument)
        await self.executor.stale.go_stale(req, inst, {
            f"ch{ch}.approved_setpoint": ("approved", "revoked") for ch in sorted(lost)})
        return True

    @staticmethod
    def _withdrawn_events(req: TakeoverRequest, gone: list[Approval]) -> list[Event]:
        return [Event(run_id=req.run_id, request_id=req.id, type=EventType.APPROVAL_WITHDRAWN,
                      data={"kind": a.kind.value, "by": a.by, "tokens": a.tokens,
                            "reason": "the token it was given with was revoked"})
                for a in gone]

    def _record_decision(self, req: TakeoverRequest) -> None:
        self.metrics["decisions"] += 1
        self.metrics["decision_seconds"] += (self.clock() - req.created_at).total_seconds()

    def _apply_edits(self, req: TakeoverRequest, edits: dict[str, str], who: Principal
                     ) -> list[Event]:
        """Approve with changes: re-render the edited actions; a new proposal, a new hash."""
        profile = self.core.profile_for(req)
        limits = self.rules(req)[1].get(req.instrument, {})
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
                    # The detail only: a column would point into a command the approver
                    # never typed.
                    raise InvalidInput(f"edit {key}={raw_value!r}: {exc.name}; "
                                       f"{exc.detail}") from exc
                if len(c.units) != 1:
                    raise InvalidInput(f"edit {key}={raw_value!r} is not one value")
                unit = c.units[0]
                breach = envelope_breach(unit, limits, profile)
                if breach:
                    raise InvalidInput(f"edit {key}={raw_value!r}: {breach}")
                a.canonical = unit.canonical
                a.new = render_value(unit.value) if unit.value is not None else None
                a.words = describe(profile, a)
        self.snaps.described(req.actions, req.snapshot, profile)
        # A new revision: never an earlier proposal again, even with the same commands,
        # so no approval this edit voids counts again after an edit back.
        req.revision += 1
        req.proposal_hash = proposal_hash(req.instrument, [a.canonical for a in req.actions],
                                          req.snapshot, req.revision, request=req.id)
        self._reshow(req, profile, limits)
        # Who changed it, and what runs now: the command as sent stays the requester's, and
        # the next approver must not have to guess why the actions say otherwise.
        req.handoff["edited"] = [*(req.handoff.get("edited") or []), {
            "by": who.name, "at": rfc3339(self.clock()), "edits": dict(edits),
            "commands": [a.canonical for a in req.actions], "revision": req.revision}]
        return [Event(run_id=req.run_id, request_id=req.id, type=EventType.PROPOSAL_EDITED,
                      data={"by": who.name, "edits": edits, "old_commands": old_commands,
                            "new_commands": [a.canonical for a in req.actions],
                            "old_hash": old_hash, "new_hash": req.proposal_hash,
                            "revision": req.revision,
                            # what the next approver is shown now, as takeover_requested
                            # keeps what the first one was
                            **{k: req.handoff[k] for k in EDITED_SHOWN}})]

    def _reshow(self, req: TakeoverRequest, profile: Profile,
                limits: dict[int, ChannelLimits]) -> None:
        """Everything the handoff derives from the actions, made again from the edited ones:
        the margins and their warnings, the change and the proposed state, reversibility
        (the margin of a value edited from 1 V to 5.9 V against 6 V still read 83 %)."""
        fresh = build_handoff(req, self.runs.get(req.run_id), profile, limits, [],
                              self.snaps.proposed(req.actions, req.snapshot, profile))
        gate = req.handoff.get("confidence_gate")
        if gate is not None:  # the gate's reason leads the signals, as when it was held
            fresh["risk"]["signals"].insert(0, gate["reason"])
        for key in (*EDITED_SHOWN, "proposal_hash"):
            req.handoff[key] = fresh[key]

    async def deny(self, request_id: str, approver: Principal, notes: str, *,
                   proposal_hash: str) -> TakeoverRequest:
        """Deny exactly the proposal ``proposal_hash`` names (the one the approver saw)."""
        if not notes.strip():
            raise InvalidInput("a denial needs a note: it goes back to the requester")
        refuse_token(notes, "notes")
        req = self.requests.get(request_id)
        run = self.runs.get(req.run_id)
        require_operator(approver)
        refuse_revoked(self.store, approver)  # a denial decides too (and suspends a run)
        if req.status is Status.PENDING and req.proposal_hash != proposal_hash:
            raise ProposalChanged(req.id, req.status.value, "deny", proposal_hash,
                                  req.proposal_hash)
        if approver.name == run.principal and run.kind is not RunKind.ENGINEER:
            raise PermissionDenied(f"{approver.name} made this request; withdraw it with "
                                   "cancel instead")
        if not self.requests.move(req, Move.DENY, EventType.TAKEOVER_DENIED,
                                  {"by": approver.name, "notes": notes},
                                  outcome=f"denied by {approver.name}: {notes}", notes=notes):
            raise TransitionError(req.id, req.status.value, "deny")
        self._record_decision(req)
        self._suspended(req, self.runs.after_denial(req, f"denied by {approver.name}"))
        return req

    def _suspended(self, req: TakeoverRequest, why: str | None) -> None:
        """The denial (or expiry) that suspended its run says so, through every door."""
        if why:
            req.outcome = f"{req.outcome}; run {req.run_id} {why}"
            self.store.save_request(req, req.version, [])

    async def cancel(self, request_id: str, who: Principal, reason: str = "withdrawn"
                     ) -> TakeoverRequest:
        req = self.requests.get(request_id)
        run = self.runs.get(req.run_id)
        if who.name != run.principal and not who.operates:
            raise PermissionDenied("only the requester or an operator can cancel a request")
        if not self.requests.move(req, Move.CANCEL, EventType.TAKEOVER_CANCELLED,
                                  {"by": who.name, "reason": reason},
                                  outcome=f"cancelled: {reason}; nothing was written"):
            raise TransitionError(req.id, req.status.value, "cancel")
        return req
