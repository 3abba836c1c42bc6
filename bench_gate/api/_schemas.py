"""Request and response bodies, camelCase on the wire."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, field_validator
from pydantic.alias_generators import to_camel

from ..auth import token_free
from ..confidence import stated_confidence
from ..errors import InvalidInput
from ..listing import AnyRequest
from ..models import ApprovalKind, Receipt, Run, RunKind, RunStatus, Status
from ..plans import Plan, PlanStatus, scope_words
from ..terms import MAX_TERM, MIN_TERM
from ..wire import utc_words, wire

__all__ = [
    "DenyBody",
    "FeedbackBody",
    "GrantBody",
    "GrantOut",
    "InstrumentOut",
    "PlanCreate",
    "PlanOut",
    "PlanRequested",
    "ProposalChangedOut",
    "RunClose",
    "RunCreate",
    "RunOut",
    "ScpiBody",
    "ScpiOut",
    "TakeoverAsk",
    "TakeoverOut",
    "Words",
    "plan_out",
    "run_out",
    "takeover_out",
]


class _Camel(BaseModel):
    """A request body: unknown keys are an error, and so is a value of another JSON type
    than the field's (strict: ``true`` is not the count 1, ``1`` or ``"yes"`` not a
    boolean, ``"5"`` not a number of minutes). FastAPI validates a body as Python objects,
    where strict would also refuse the JSON forms of an enum, a pair and a decimal: those
    fields say ``LAX``."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True,
                              extra="forbid", strict=True)


#: A field of a strict body read as JSON gives it: an enum from its string value, a pair
#: from an array, a decimal from a number or a decimal string (never ``true``).
LAX = Strict(False)
Dec = Annotated[Decimal, LAX]


class _Out(BaseModel):
    """A response body: the core's records may carry more than the API shows."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True,
                              extra="ignore")


#: Free text people read, stored and journaled (a goal, a note, a reason): never a token.
_FREE = AfterValidator(token_free)
#: A sentence the gateway wrote (an outcome, a message): its times in RFC 3339 with Z.
Words = Annotated[str, AfterValidator(utc_words)]


def _confidence_in_range(rationale: str | None) -> str | None:
    """A rationale whose ``Confidence:`` is outside 0..1 (0..100 %), NaN or inf is refused."""
    try:
        stated_confidence(rationale)
    except InvalidInput as exc:
        raise ValueError(exc.message) from exc
    return rationale


class RunCreate(_Camel):
    kind: Annotated[RunKind, LAX]
    goal: Annotated[str | None, _FREE] = Field(default=None, max_length=2000)
    #: The run closes ("client gone") if its client is silent this long (terms.py).
    heartbeat_seconds: int | None = Field(
        default=None, ge=MIN_TERM, le=MAX_TERM, strict=True,
        description=("a heartbeat term, in whole seconds: if the run's own client sends "
                     "nothing (no submit, no POST /v1/runs/{id}/heartbeat) for this long, "
                     "the run is closed and its undecided requests are cancelled"))


class RunClose(_Camel):
    #: Why, for the outcome of each request it cancels (default: closed by whom).
    reason: Annotated[str | None, _FREE] = Field(default=None, min_length=1, max_length=500)


class RunOut(_Out):
    id: str
    kind: RunKind
    principal: str
    goal: str | None
    status: RunStatus
    created_at: datetime
    takeover_reason: str | None = None
    takeover_by: str | None = None
    heartbeat_seconds: int | None = None
    closed_reason: str | None = None


class ScpiBody(_Camel):
    instrument: str = Field(min_length=1, max_length=64)
    command: str = Field(min_length=1, max_length=4096)
    rationale: Annotated[str | None, _FREE, AfterValidator(_confidence_in_range)] = Field(
        default=None, max_length=4000)
    #: A JSON number from 0 to 1 (strict: ``true`` or ``"1"`` is not a confidence).
    confidence: float | None = Field(default=None, ge=0, le=1, strict=True)
    step_id: Annotated[str | None, _FREE] = Field(default=None, max_length=200)
    timeout_minutes: int | None = Field(default=None, ge=1, le=1440)


class TakeoverAsk(_Camel):
    reason: Annotated[str, _FREE] = Field(min_length=1, max_length=2000)
    step_id: Annotated[str | None, _FREE] = Field(default=None, max_length=200)
    #: Accepted for the issue's shape; a takeover lasts until release (not enforced yet).
    timeout_minutes: int | None = Field(default=None, ge=1, le=1440)


def _proposal_hash() -> Any:
    """A decision names the proposal its approver was shown (DESIGN rule 7)."""
    return Field(default=None, min_length=1, max_length=128, description=(
        "the proposalHash of the request as the approver was shown it (GET "
        "/v1/takeover/{tkId} gives it, and its ETag); an If-Match header may carry it "
        "instead. One of the two is required (428 without); a hash that is no longer "
        "current is a 409 with the current proposal"))


class GrantBody(_Camel):
    approve: list[Annotated[ApprovalKind, LAX]] = Field(min_length=1)
    notes: Annotated[str, _FREE] = Field(default="", max_length=4000)
    edits: dict[str, str] | None = None
    proposal_hash: str | None = _proposal_hash()


class DenyBody(_Camel):
    notes: Annotated[str, _FREE] = Field(min_length=1, max_length=4000)
    proposal_hash: str | None = _proposal_hash()


class ApprovalOut(_Out):
    kind: ApprovalKind
    by: str
    at: datetime
    notes: str


class TakeoverOut(_Out):
    id: str
    run_id: str
    instrument: str
    message: str
    status: Status
    commands: list[str]
    required: list[ApprovalKind]
    approvals_given: list[ApprovalOut]
    approvals_missing: list[ApprovalKind]
    reason: str
    #: The requester's words for why (the same ``rationale`` it submitted).
    rationale: str | None = None
    step_id: str | None = None
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None = None
    #: Who denied or cancelled it (an approved one's approvers are in approvalsGiven).
    decided_by: str | None = None
    outcome: Words | None = None
    notes: Words | None = None
    receipt: dict[str, Any] | None = None
    supersedes: str | None = None
    superseded_by: str | None = None
    proposal_hash: str
    #: The plan this request asks for (a plan request) or ran inside (an unattended step).
    plan_id: str | None = None
    #: The full handoff (camelCase, as every key here); only on ``GET /v1/takeover/{tkId}``
    #: and after a submit.
    handoff: dict[str, Any] | None = None


class ScpiOut(_Out):
    status: str
    response: str | None = None
    takeover: TakeoverOut | None = None
    reason: str | None = None


class GrantOut(_Out):
    request: TakeoverOut
    missing: list[ApprovalKind]
    message: Words


class ProposalChangedOut(_Out):
    """The 409 of a grant or denial (problem+json). When it names a proposal that is no
    longer current (type ``.../problems/proposal-changed``) it carries the current one;
    any other conflict (the request is no longer pending) has only the problem fields."""

    type: str
    title: str
    status: int
    detail: str
    reason: str
    #: The hash the decision named (what its approver was shown).
    seen_proposal_hash: str | None = None
    #: The request's proposal now: decide again on this one, after showing it.
    current_proposal_hash: str | None = None
    #: The request as it stands, with its handoff (actions in words, proposed state).
    current: TakeoverOut | None = None


class InstrumentOut(_Out):
    name: str
    profile: str
    resource: str
    door_host: str | None = None
    door_port: int | None = None
    #: The instrument lock (docs/interlocks.md §2): "locked", "not lockable", "lock
    #: refused: held by LAN2"...; the warning is set whenever the gateway does not hold it.
    lock: str = "not lockable"
    locked: bool = False
    lock_owner: str | None = None
    lock_warning: str | None = None
    #: Its profile's identities (identity.py), what it last answered to ``*IDN?``, and,
    #: while that is another instrument, why every message to it is refused.
    identity: list[str] = Field(default_factory=list)
    idn: str | None = None
    wrong_instrument: str | None = None
    #: The profile's own name (``profile`` is as bench.toml gives it: a name or a path).
    profile_name: str | None = None
    #: Why the last job on it did not reach it (unreachable, no answer); None once one did.
    unreachable: str | None = None


def run_out(run: Run) -> RunOut:
    return RunOut.model_validate(run.model_dump())


def takeover_out(req: AnyRequest, *, handoff: bool = False) -> TakeoverOut:
    """A request as the API shows it, whole or listed (a list's summary keeps its receipt
    in the JSON form it was stored in, the form shown here)."""
    valid = req.valid_approvals()
    receipt = req.receipt.model_dump(mode="json") if isinstance(req.receipt, Receipt) \
        else req.receipt
    return TakeoverOut(
        id=req.id, run_id=req.run_id, instrument=req.instrument, message=req.message,
        status=req.status, commands=[a.canonical for a in req.actions],
        required=list(req.required),
        approvals_given=[ApprovalOut(kind=a.kind, by=a.by, at=a.at, notes=a.notes)
                         for a in valid],
        approvals_missing=req.missing(), reason=req.reason, rationale=req.rationale,
        step_id=req.step_id, created_at=req.created_at, expires_at=req.expires_at,
        decided_at=req.decided_at, decided_by=req.decided_by,
        outcome=req.outcome, notes=req.notes,
        receipt=wire(receipt) if receipt is not None else None,
        supersedes=req.supersedes, superseded_by=req.superseded_by,
        proposal_hash=req.proposal_hash, plan_id=req.plan_id,
        handoff=wire(req.handoff) if handoff else None)


# --------------------------------------------------------------------------- plans
Channel = Annotated[int, Field(ge=1, le=9999)]


class PlanCreate(_Camel):
    """A standing plan's scope (``docs/plans.md``); the bench envelope is checked too."""

    instrument: str = Field(min_length=1, max_length=64)
    channels: list[Channel] = Field(min_length=1, max_length=64)
    voltage: Annotated[tuple[Dec, Dec], LAX] = Field(description="[min, max] in V")
    current_max: Dec = Field(ge=0, le=10_000, description="A")
    max_step: Dec | None = Field(default=None, gt=0, le=10_000, description="V")
    output_enable: bool = False
    max_writes: int = Field(ge=1, le=100_000)
    timeout_minutes: int = Field(default=60, ge=1, le=1440)
    rationale: Annotated[str | None, _FREE] = Field(default=None, max_length=4000)

    @field_validator("voltage")
    @classmethod
    def _range(cls, value: tuple[Decimal, Decimal]) -> tuple[Decimal, Decimal]:
        lo, hi = value
        if lo < 0:
            raise ValueError(f"voltage range cannot go below 0 (got min {lo})")
        if lo > hi:
            raise ValueError(f"voltage must be [min, max] with min <= max (got [{lo}, {hi}])")
        if hi > 10_000:
            raise ValueError(f"voltage max {hi} is not a bench voltage")
        return value

    def scope(self) -> dict[str, Any]:
        """The core's PlanScope fields."""
        return self.model_dump(exclude={"rationale"})


class PlanScopeOut(_Out):
    instrument: str
    channels: list[int]
    voltage: tuple[float, float]
    current_max: float
    max_step: float | None
    output_enable: bool
    max_writes: int
    timeout_minutes: int


class PlanOut(_Out):
    id: str
    run_id: str
    request_id: str
    status: PlanStatus
    scope: PlanScopeOut
    words: list[str]
    writes_used: int
    writes_left: int
    created_at: datetime
    expires_at: datetime | None = None
    approved_by: list[str]
    revoked_by: str | None = None


class PlanRequested(_Out):
    """The plan request: decided through the ordinary grant and deny."""

    status: Status
    takeover: TakeoverOut
    plan: PlanOut


class FeedbackBody(_Camel):
    step_id: Annotated[str, _FREE] = Field(min_length=1, max_length=200)
    score: int = Field(ge=1, le=5, description="1 (wrong) to 5 (right); 2 or less is regret")
    notes: Annotated[str, _FREE] = Field(default="", max_length=4000)


def plan_out(plan: Plan) -> PlanOut:
    return PlanOut(
        id=plan.id, run_id=plan.run_id, request_id=plan.request_id, status=plan.status,
        scope=PlanScopeOut.model_validate(plan.scope.model_dump()),
        words=scope_words(plan.scope), writes_used=plan.writes_used,
        writes_left=plan.writes_left, created_at=plan.created_at,
        expires_at=plan.expires_at, approved_by=plan.approved_by, revoked_by=plan.revoked_by)
