"""The gateway's records: runs, takeover requests, approvals, receipts, journal events.

They are pydantic models so the store can keep them as JSON and the doors can return them.
"""

from __future__ import annotations

import enum
import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Action",
    "Approval",
    "ApprovalKind",
    "Event",
    "EventType",
    "Principal",
    "Receipt",
    "Role",
    "Run",
    "RunKind",
    "RunStatus",
    "SentLine",
    "Snapshot",
    "Status",
    "TakeoverRequest",
    "now",
    "proposal_hash",
]


def now() -> datetime:
    return datetime.now(UTC)


class Role(enum.StrEnum):
    """Roles nest: a requester's rights < an operator's < an admin's."""

    REQUESTER = "requester"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return list(Role).index(self)


class Principal(BaseModel):
    """An authenticated caller. Identity always comes from authentication."""

    model_config = ConfigDict(frozen=True)

    name: str
    role: Role = Role.REQUESTER
    #: The id of the token that authenticated this caller (never its secret): an approval
    #: records it and counts only while that token is not revoked.
    token: str = ""

    @property
    def operates(self) -> bool:
        """An operator or an admin: decides requests, answers questions, sees every run."""
        return self.role.rank >= Role.OPERATOR.rank

    def at_least(self, role: Role) -> bool:
        return self.role.rank >= role.rank


class RunKind(enum.StrEnum):
    ENGINEER = "engineer"
    SCRIPT = "script"
    AGENT = "agent"


class RunStatus(enum.StrEnum):
    ACTIVE = "active"
    TAKEN_OVER = "taken_over"  # an operator holds every write until release
    SUSPENDED = "suspended"
    CLOSED = "closed"


class Status(enum.StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    EXECUTING = "executing"
    EXECUTED = "executed"
    FAILED = "failed"
    AMBIGUOUS = "ambiguous"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    STALE = "stale"


class ApprovalKind(enum.StrEnum):
    SETPOINT = "setpoint"
    OUTPUT_ENABLE = "output_enable"
    STATE = "state"


class EventType(enum.StrEnum):
    RUN_CREATED = "run_created"
    COMMAND_RECEIVED = "command_received"
    READ_EXECUTED = "read_executed"
    WRITE_REFUSED = "write_refused"
    TAKEOVER_REQUESTED = "takeover_requested"
    APPROVAL_GRANTED = "approval_granted"
    #: An approval stopped counting: the token it was given with was revoked.
    APPROVAL_WITHDRAWN = "approval_withdrawn"
    PROPOSAL_EDITED = "proposal_edited"
    TAKEOVER_DENIED = "takeover_denied"
    TAKEOVER_EXPIRED = "takeover_expired"
    TAKEOVER_CANCELLED = "takeover_cancelled"
    TAKEOVER_STALE = "takeover_stale"
    STEP_STARTED = "step_started"
    STEP_COMPLETED = "step_completed"
    STEP_FAILED = "step_failed"
    TAKEOVER_RELEASED = "takeover_released"
    RUN_TAKEN_OVER = "run_taken_over"
    CONFIDENCE_EVALUATED = "confidence_evaluated"
    RUN_SUSPENDED = "run_suspended"
    PLAN_ACTIVATED = "plan_activated"
    PLAN_REVOKED = "plan_revoked"
    FEEDBACK_GIVEN = "feedback_given"
    GOAL_SET = "goal_set"
    QUESTION_ASKED = "question_asked"
    QUESTION_ANSWERED = "question_answered"
    QUESTION_EXPIRED = "question_expired"
    QUESTION_CANCELLED = "question_cancelled"
    #: A channel read back outside the envelope while energized; the safe action followed.
    ENVELOPE_BREACH = "envelope_breach"
    #: Someone pressed the emergency stop; and an operator cleared it.
    EMERGENCY_STOP = "emergency_stop"
    STOP_CLEARED = "stop_cleared"
    #: A stopped instrument read with an output not shown off (switched on at the panel,
    #: or the stop's safe action failed): the safe action again; or shown off at last.
    STOP_ENFORCED = "stop_enforced"
    #: A run that energized an output stopped renewing its lease (its client is gone).
    LEASE_EXPIRED = "lease_expired"
    #: The gateway took (or could not take) an instrument's lock (bench_gate/locking.py).
    INSTRUMENT_LOCK = "instrument_lock"
    #: The instrument's *IDN? stopped (or started again) fitting its profile (identity.py).
    INSTRUMENT_IDENTITY = "instrument_identity"
    #: The watch could not read an enveloped instrument (it answered nothing, or garbage),
    #: or can again: its channels were not watched meanwhile.
    WATCH_BLIND = "watch_blind"
    #: A run was closed (by its requester, its connection ending, or its heartbeat term).
    RUN_CLOSED = "run_closed"


class Run(BaseModel):
    id: str
    kind: RunKind
    principal: str
    goal: str | None = None
    status: RunStatus = RunStatus.ACTIVE
    created_at: datetime = Field(default_factory=now)
    #: The operator's takeover, while the run is taken over.
    takeover_reason: str | None = None
    takeover_by: str | None = None
    #: Denials (expiries count) since the last executed write, and in all.
    denials_in_a_row: int = 0
    denials_total: int = 0
    #: Its client must be heard from at least this often, or it closes (terms.py).
    heartbeat_seconds: int | None = None
    #: Why it closed, once closed.
    closed_reason: str | None = None
    #: The id of the token it was made with: revoking that token closes it.
    token: str = ""


class Action(BaseModel):
    """One canonical unit of a held write, with what it changes."""

    index: int
    source: int
    text: str  # the unit as the client sent it
    effect: str
    channel: int | None = None
    field: str | None = None
    old: str | None = None  # from the snapshot, rendered
    new: str | None = None  # rendered
    canonical: str
    approval: ApprovalKind | None = None
    words: str = ""
    #: The gateway cannot predict what this does to setpoints and outputs (``*RCL``...).
    unpredictable: bool = False
    #: For ``excites``: what the instrument applies, where the command alone does not say
    #: (a reading while the meter's function drives current: scpi/_excitation.py).
    applies: str = ""


class Snapshot(BaseModel):
    """Live values read from the instrument for every field the actions touch."""

    idn: str
    values: dict[str, str]  # "ch1.voltage" -> "5.0"
    taken_at: datetime = Field(default_factory=now)
    #: The stored states the write recalls, as the gateway recorded them when they were
    #: saved ("slot 3" -> its state, with "@saved_at"): bench_gate/memories.py.
    recalled: dict[str, dict[str, str]] = Field(default_factory=dict)

    def diff(self, other: Snapshot) -> dict[str, tuple[str | None, str | None]]:
        keys = set(self.values) | set(other.values)
        out = {k: (self.values.get(k), other.values.get(k)) for k in sorted(keys)
               if self.values.get(k) != other.values.get(k)}
        if self.idn != other.idn:
            out["*IDN?"] = (self.idn, other.idn)
        return out


class Approval(BaseModel):
    kind: ApprovalKind
    by: str
    at: datetime = Field(default_factory=now)
    notes: str = ""
    proposal_hash: str
    #: For an approval given by a plan: the people who approved the plan.
    people: list[str] = Field(default_factory=list)
    #: The ids of the tokens it was given with (a plan's: its approvers'). It counts only
    #: while none of them is revoked: a leaked token's approvals die with it.
    tokens: list[str] = Field(default_factory=list)


class SentLine(BaseModel):
    """One line of a receipt, in order: a text exactly as the instrument got it, or a unit
    of the request that was not sent; ``added`` and ``why`` when the gateway added it
    (a selection before a command, on an instrument that addresses outputs by selection)
    or kept it back (a run's selection, ``*CLS`` answered by the gateway)."""

    text: str
    sent: bool = True
    added: bool = False
    why: str = ""


class Receipt(BaseModel):
    #: Exactly what reached the instrument, in order (``lines`` says who added what, why).
    sent: list[str]
    before: dict[str, str]
    after: dict[str, str]
    approvals: list[Approval]
    started_at: datetime
    finished_at: datetime
    reconciled: bool = False
    detail: str = ""
    lines: list[SentLine] = Field(default_factory=list)
    #: The state each save stored ("slot 3" -> its fields), read just before it was sent.
    stored: dict[str, dict[str, str]] = Field(default_factory=dict)


class TakeoverRequest(BaseModel):
    id: str
    run_id: str
    instrument: str
    message: str
    actions: list[Action]
    required: list[ApprovalKind]
    approvals: list[Approval] = Field(default_factory=list)
    status: Status = Status.PENDING
    reason: str
    step_id: str | None = None
    rationale: str | None = None
    confidence: float | None = None
    idempotency_key: str | None = None
    timeout_minutes: int
    created_at: datetime = Field(default_factory=now)
    expires_at: datetime
    decided_at: datetime | None = None
    snapshot: Snapshot
    proposal_hash: str
    handoff: dict[str, Any] = Field(default_factory=dict)
    receipt: Receipt | None = None
    notes: str | None = None  # the operator's notes on a denial, or why it failed
    #: Who denied or cancelled it (the approvers of an approved one are in ``approvals``).
    decided_by: str | None = None
    outcome: str | None = None  # one sentence for the requester
    supersedes: str | None = None
    superseded_by: str | None = None
    #: A plan request's plan, or the plan that let this write through.
    plan_id: str | None = None
    #: The bench (gateway) that owns the instrument; only it ever executes the request.
    bench: str = ""
    #: Runs when its requester resends the identical command before it expires, not at its
    #: last approval (the socket door's ``on_hold = "refuse"``).
    on_resend: bool = False
    #: How many edits (approve with changes) made its proposal: part of its hash, so an
    #: edit back to earlier values never revives the approvals an edit voided.
    revision: int = 0
    version: int = 0

    def valid_approvals(self) -> list[Approval]:
        return [a for a in self.approvals if a.proposal_hash == self.proposal_hash]

    def approved_kinds(self) -> set[ApprovalKind]:
        return {a.kind for a in self.valid_approvals()}

    def missing(self) -> list[ApprovalKind]:
        have = self.approved_kinds()
        return [k for k in self.required if k not in have]


class Event(BaseModel):
    seq: int = 0
    run_id: str
    request_id: str | None = None
    type: EventType
    at: datetime = Field(default_factory=now)
    data: dict[str, Any] = Field(default_factory=dict)
    #: The journal's hash chain, set by the store when the event is appended: the hash of
    #: the event before it in the store, and this event's own (bench_gate.store._chain).
    prev: str = ""
    hash: str = ""


def proposal_hash(instrument: str, canonical: list[str], snapshot: Snapshot,
                  revision: int = 0, request: str = "") -> str:
    """sha256 over the instrument identity, the canonical commands and the snapshot shown,
    with the stored states it recalls (a slot saved again since is another proposal) and,
    once a request was edited, its revision: an edit back to earlier values is a new
    proposal, so no approval an edit voided ever counts again. With ``request``, the request
    it was shown as: two requests asking the same thing from the same state (another run, its
    own rationale) had one hash, and a grant naming the one a person was shown approved the
    other, never shown."""
    shown: dict[str, Any] = {"instrument": instrument, "idn": snapshot.idn,
                             "commands": canonical, "snapshot": snapshot.values}
    if snapshot.recalled:
        shown["recalled"] = snapshot.recalled
    if revision:  # absent before any edit: a request's first hash is what it always was
        shown["revision"] = revision
    if request:
        shown["request"] = request
    body = json.dumps(shown, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()
