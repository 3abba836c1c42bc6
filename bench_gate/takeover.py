"""Takeover requests: the one factory that holds a proposal for a person (live snapshot,
required approvals, the handoff as shown, expiry, proposal hash), reading them, and every
status change through the transition table (``states.py``), one compare-and-swap each.

Other parts react to a status change through listeners registered here (a denial counts
against the run, an executed write resets that count, a plan request's end closes its
plan), never through side effects hidden in the move itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from .core import MAX_RETRIES, Core, Instrument, Part, new_id
from .errors import InvalidInput, NotFound, Refused
from .handoff import build_handoff, shown_fields, snapshot_key
from .models import (
    ApprovalKind,
    Event,
    EventType,
    Run,
    RunStatus,
    Snapshot,
    Status,
    TakeoverRequest,
    proposal_hash,
)
from .scpi import Classification
from .setpoints import Setpoints
from .snapshots import Snapshots
from .states import TERMINAL, target
from .states import Event as Move
from .store import RequestPage
from .wire import rfc3339

#: How many requests an ambiguous id prefix lists.
PREFIX_MATCHES = 10
#: No request id is longer (``tk-`` and a UUID are 39): a longer prefix starts none, and
#: is never made a LIKE pattern (SQLite refused 50,000 characters: a 503 "store error").
LONGEST_ID = 64

__all__ = ["Listener", "Requests"]


def _clip(text: str) -> str:
    """An id as an error quotes it: never 60 KB of a mistaken paste back."""
    return repr(text) if len(text) <= LONGEST_ID else repr(text[:LONGEST_ID]) + "..."

#: A waiter looks again at least this often, in case a wake-up was lost.
WAKE_SECONDS = 1.0

#: Called after every status change that was stored: (the request, its new status).
Listener = Callable[[TakeoverRequest, Status], None]


class Requests(Part):
    def __init__(self, core: Core, snaps: Snapshots, setpoints: Setpoints) -> None:
        super().__init__(core)
        self.snaps = snaps
        self.setpoints = setpoints
        self.listeners: list[Listener] = []
        #: Refuses (-203) a write (None: a plan) to a stopped instrument, asked once the
        #: snapshot read its ``*IDN?``: another name no spelling rule can tell (an alias).
        self.stopped: Callable[[str, Classification | None], None] | None = None

    def timeout(self, minutes: int | None) -> int:
        policy = self.config.policy
        value = policy.default_timeout_minutes if minutes is None else minutes
        if not 1 <= value <= policy.max_timeout_minutes:
            raise InvalidInput(f"timeoutMinutes must be 1 to {policy.max_timeout_minutes}, "
                               f"not {value}")
        return value

    async def hold(self, run: Run, inst: Instrument, message: str, c: Classification,
                   required: list[ApprovalKind], *, reason: str, rationale: str | None,
                   confidence: float | None, step_id: str | None,
                   idempotency_key: str | None, timeout: int, events: list[Event],
                   supersedes: TakeoverRequest | None = None,
                   stale_diff: dict[str, tuple[str | None, str | None]] | None = None,
                   gate: dict[str, Any] | None = None, on_resend: bool = False,
                    ) -> TakeoverRequest:
        from .quotas import check_pending  # limits.pending_requests, before the snapshot;
        if supersedes is None:             # a stale request's replacement is no new filing
            check_pending(self.core, run)
        preliminary = self.snaps.actions(inst, c, None)
        live = await self.snaps.snapshot(inst, self.snaps.fields(inst, preliminary))
        if self.stopped is not None:
            self.stopped(inst.config.name, c)
        now = self.store.get_run(run.id)  # it may have closed while the snapshot was read
        if now is not None and now.status in (RunStatus.CLOSED, RunStatus.SUSPENDED):
            raise Refused(-203, f"the run is {now.status.value}: nothing more is held for it")
        snap, earlier = self._after_earlier(run, inst, live, supersedes)
        recalled = self.snaps.memories.recalled(inst, (u.canonical for u in c.units), snap.idn)
        if recalled:  # what a recall brings back, as recorded when it was saved
            snap = snap.model_copy(update={"recalled": recalled})
        actions = self.snaps.actions(inst, c, snap)
        self.snaps.check_envelope(inst, actions, snap)
        energize = self.setpoints.energize_needs_setpoint(inst, actions, snap)
        if energize and ApprovalKind.SETPOINT not in required:
            required = [ApprovalKind.SETPOINT, *required]
        created = self.clock()
        request_id = new_id("tk")
        req = TakeoverRequest(
            id=request_id, run_id=run.id, instrument=inst.config.name, message=message,
            actions=actions, required=required, reason=reason, step_id=step_id,
            rationale=rationale, confidence=confidence, idempotency_key=idempotency_key,
            timeout_minutes=timeout, created_at=created,
            expires_at=created + timedelta(minutes=timeout), snapshot=snap,
            proposal_hash=proposal_hash(inst.config.name, [a.canonical for a in actions], snap,
                                        request=request_id),
            supersedes=supersedes.id if supersedes is not None else None,
            bench=self.config.bench, on_resend=on_resend)
        history = self.store.recent(run.id, limit=40)
        req.handoff = build_handoff(req, run, inst.profile,
                                    self.config.envelope.get(inst.config.name, {}), history,
                                    self.snaps.proposed(actions, snap, inst.profile), stale_diff)
        if gate is not None:
            req.handoff["confidence_gate"] = gate
            req.handoff["risk"]["signals"].insert(0, gate["reason"])
        if earlier:
            req.handoff["after_earlier"] = earlier
            req.handoff["live"] = live.values
        if energize:
            # Every field under the envelope (an SMU's too) that this request does not set.
            req.handoff["setpoint_needed"] = [
                {"channel": ch, **{f: snap.values.get(snapshot_key(ch, f)) for f in rest}}
                for ch, rest in energize.items()]
            req.handoff["setpoint_needed_shown"] = shown_fields(
                inst.profile, req.handoff["setpoint_needed"])
        cover = self.setpoints.cover(inst, actions, snap)
        if cover:  # the setpoint approval an output enable stands on (setpointCover)
            req.handoff["setpoint_cover"] = cover
        events = [*events, Event(run_id=run.id, request_id=req.id,
                                 type=EventType.TAKEOVER_REQUESTED, data=req.handoff)]
        stored = self.store.create_request(req, events)
        self.core.notifier.request_changed(stored)
        return stored

    def _after_earlier(self, run: Run, inst: Instrument, live: Snapshot,
                       supersedes: TakeoverRequest | None
                       ) -> tuple[Snapshot, list[dict[str, Any]]]:
        """The state this run's earlier undecided writes on the instrument will leave, for a
        request to be judged against (VOLT, then CURR, then OUTP ON, approved in that
        order, must not go stale on each other). The approver sees it labelled ("after
        tk-… executes"), and the recheck compares the live state with it: if an earlier
        request does not run as shown, this one goes stale. A command whose effect cannot
        be predicted is not applied: this request is judged on the live state."""
        earlier: list[TakeoverRequest] = []
        for status in (Status.PENDING, Status.APPROVED, Status.EXECUTING):
            earlier.extend(self.store.list_requests(status=status, run_id=run.id,
                                                    instrument=inst.config.name, limit=100))
        values = dict(live.values)
        setter: dict[str, str] = {}  # field -> the last earlier request that sets it
        order: list[str] = []
        skip = supersedes.id if supersedes is not None else None
        for r in sorted(earlier, key=lambda r: r.created_at):
            if r.id == skip or any(a.unpredictable for a in r.actions):
                continue
            if r.bench not in ("", self.config.bench):
                continue  # another bench's instrument of the same name: another instrument
            for a in r.actions:
                key = snapshot_key(a.channel, a.field) if a.field is not None else ""
                if a.new is not None and key in values and values[key] != a.new:
                    values[key] = a.new
                    setter[key] = r.id
                    order.append(r.id)
        # Only the request each field's value comes from is shown: a long queue of
        # setpoints on one field names its last one, not all of them (the handoff stays
        # small however many requests wait before it).
        shown: list[dict[str, Any]] = []
        for rid in dict.fromkeys(order):
            changes = {k: values[k] for k, who in setter.items() if who == rid}
            if changes:
                shown.append({"request": rid, "changes": changes,
                              "words": f"after {rid} executes: " + ", ".join(
                                  f"{k} {v}" for k, v in changes.items())})
        if not shown:
            return live, []
        return Snapshot(idn=live.idn, values=values, taken_at=live.taken_at), shown

    def get(self, request_id: str) -> TakeoverRequest:
        req = self.store.get_request(request_id)
        if req is None:
            raise NotFound(f"no takeover request {_clip(request_id)}")
        return req

    def by_prefix(self, prefix: str, visible: Callable[[str], bool]) -> TakeoverRequest:
        """The one request whose id starts with ``prefix`` among those whose run is
        ``visible``: none is NotFound, several an InvalidInput that lists them (never one
        the caller may not see)."""
        if not prefix or len(prefix) > LONGEST_ID:
            raise NotFound(f"no request {_clip(prefix)}, nor one whose id starts with it")
        ids = self.store.request_ids(prefix, PREFIX_MATCHES + 1)
        # Unless every match was read, one the caller sees may hide another it sees too.
        complete = len(ids) <= PREFIX_MATCHES
        found = [r for i in ids
                 if (r := self.store.get_request(i)) is not None and visible(r.run_id)]
        if len(found) == 1 and complete:
            return found[0]
        if not found and complete:
            raise NotFound(f"no request {prefix!r}, nor one whose id starts with it")
        listed = ", ".join(r.id for r in found[:PREFIX_MATCHES]) or "none of them yours"
        more = "" if complete else ", and more"
        raise InvalidInput(f"{prefix!r} is the start of more than one request ({listed}{more}):"
                           " give more of the id")

    def page(self, status: Status | None = None, run_id: str | None = None,
             instrument: str | None = None, limit: int = 100, offset: int = 0,
             sort: str = "newest", requester: str | None = None
                      ) -> RequestPage:
        """One page, sorted in the store (``newest``, or ``expiry``: soonest first): a list
        that also carries ``total``, how many match. Its items are what a list shows
        (``RequestSummary``), never a request, so the store never saves one back."""
        return self.store.page_requests(status, run_id, instrument, limit, offset, sort,
                                        requester)

    def move(self, req: TakeoverRequest, move: Move, event: EventType,
             data: dict[str, Any], *, outcome: str | None = None,
             notes: str | None = None, only_from: Status | None = None) -> bool:
        """One conditional transition with its journal event; False if it lost a race.
        With ``only_from``, only from that status: one that moved on meanwhile (a write
        started by another gateway) is left as it is."""
        for _ in range(MAX_RETRIES):
            dst = target(req.status, move)
            if dst is None or (only_from is not None and req.status is not only_from):
                return False
            version = req.version
            req.status = dst
            if outcome is not None:
                req.outcome = outcome
            if notes is not None:
                req.notes = notes
            if dst in TERMINAL and req.decided_at is None:
                req.decided_at = self.clock()
                if dst in (Status.DENIED, Status.CANCELLED) and data.get("by"):
                    req.decided_by = str(data["by"])  # who denied or cancelled it
            extra = {"plan_id": req.plan_id} if req.plan_id else {}
            ev = Event(run_id=req.run_id, request_id=req.id, type=event,
                       data={**data, "status": dst.value, **extra})
            if self.store.save_request(req, version, [ev]):
                self.core.notifier.request_changed(req)
                for listener in self.listeners:
                    listener(req, dst)
                return True
            fresh = self.store.get_request(req.id)
            if fresh is None:
                return False
            req.__dict__.update(fresh.__dict__)
        return False

    def expire_unsent(self, req: TakeoverRequest) -> int:
        """An approved request that runs on its requester's resend (``on_resend``), past its
        expiry and never resent: it ends expired and never runs. 1 if this moved it."""
        return int(self.move(req, Move.EXPIRE, EventType.TAKEOVER_EXPIRED,
                             {"expires_at": req.expires_at.isoformat()},
                             outcome="expired: approved, but not resent before "
                                     f"{rfc3339(req.expires_at)}; nothing was written"))

    def missing_message(self, req: TakeoverRequest) -> str:
        missing = req.missing()
        if not missing:
            return ""
        blind = [a.canonical for a in req.actions if a.unpredictable]
        if blind:
            return (f"still needs approval: {', '.join(k.value for k in missing)} (the gateway "
                    f"cannot predict what {', '.join(blind)} does to setpoints and outputs, "
                    "so it needs every approval)")
        channels = [a.channel for a in req.actions if a.approval is ApprovalKind.OUTPUT_ENABLE]
        # a plan's request has no channel on its actions: its output enable is the plan's
        chs = ", ".join(f"CH{c}" for c in channels if c is not None)
        have = req.approved_kinds()
        if ApprovalKind.SETPOINT in missing and ApprovalKind.OUTPUT_ENABLE in have:
            return (f"{chs or 'the'} output enable approved, but no approved setpoint"
                    f"{f' for {chs}' if chs else ''}: approve a setpoint first")
        if ApprovalKind.OUTPUT_ENABLE in missing and ApprovalKind.SETPOINT in have:
            return (f"setpoint approved; the output enable{f' of {chs}' if chs else ''} "
                    "still needs its own approval")
        return "still needs approval: " + ", ".join(k.value for k in missing)

    async def wait(self, request_id: str, timeout: float, *, follow: bool = True
                   ) -> TakeoverRequest:
        """Wait for a decision, holding no thread. With ``follow`` (a requester's view) a
        stale request is followed to the fresh one that replaced it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        while True:
            # Registered before reading, so a change between the read and the wait wakes us.
            with self.core.notifier.waiting(request_id) as event:
                req = self.get(request_id)
                if follow and req.status is Status.STALE and req.superseded_by:
                    request_id = req.superseded_by
                    continue
                # A stale request gets its fresh successor a moment after it turns stale.
                if req.status in TERMINAL and (req.status is not Status.STALE or not follow):
                    return req
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return req
                # A parked waiter keeps only the id: the request itself lives in the store
                # (a whole TakeoverRequest per waiter was most of a parked request's memory).
                del req
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), timeout=min(remaining, WAKE_SECONDS))
