"""Request and response bodies, camelCase on the wire."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from ..models import ApprovalKind, Run, RunKind, RunStatus, Status, TakeoverRequest

__all__ = [
    "DenyBody",
    "GrantBody",
    "GrantOut",
    "InstrumentOut",
    "RunCreate",
    "RunOut",
    "ScpiBody",
    "ScpiOut",
    "TakeoverAsk",
    "TakeoverOut",
    "run_out",
    "takeover_out",
]


class _Camel(BaseModel):
    """A request body: unknown keys are an error."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True,
                              extra="forbid")


class _Out(BaseModel):
    """A response body: the core's records may carry more than the API shows."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True,
                              extra="ignore")


class RunCreate(_Camel):
    kind: RunKind
    goal: str | None = Field(default=None, max_length=2000)


class RunOut(_Out):
    id: str
    kind: RunKind
    principal: str
    goal: str | None
    status: RunStatus
    created_at: datetime
    takeover_reason: str | None = None
    takeover_by: str | None = None


class ScpiBody(_Camel):
    instrument: str = Field(min_length=1, max_length=64)
    command: str = Field(min_length=1, max_length=4096)
    rationale: str | None = Field(default=None, max_length=4000)
    confidence: float | None = Field(default=None, ge=0, le=1)
    step_id: str | None = Field(default=None, max_length=200)
    timeout_minutes: int | None = Field(default=None, ge=1, le=1440)


class TakeoverAsk(_Camel):
    reason: str = Field(min_length=1, max_length=2000)
    step_id: str | None = Field(default=None, max_length=200)
    #: Accepted for the issue's shape; a takeover lasts until release (not enforced yet).
    timeout_minutes: int | None = Field(default=None, ge=1, le=1440)


class GrantBody(_Camel):
    approve: list[ApprovalKind] = Field(min_length=1)
    notes: str = Field(default="", max_length=4000)
    edits: dict[str, str] | None = None


class DenyBody(_Camel):
    notes: str = Field(min_length=1, max_length=4000)


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
    step_id: str | None = None
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None = None
    outcome: str | None = None
    notes: str | None = None
    receipt: dict[str, Any] | None = None
    supersedes: str | None = None
    superseded_by: str | None = None
    proposal_hash: str
    #: The full handoff; only on ``GET /v1/takeover/{tkId}`` and after a submit.
    handoff: dict[str, Any] | None = None


class ScpiOut(_Out):
    status: str
    response: str | None = None
    takeover: TakeoverOut | None = None
    reason: str | None = None


class GrantOut(_Out):
    request: TakeoverOut
    missing: list[ApprovalKind]
    message: str


class InstrumentOut(_Out):
    name: str
    profile: str
    resource: str
    door_host: str | None = None
    door_port: int | None = None


def run_out(run: Run) -> RunOut:
    return RunOut.model_validate(run.model_dump())


def takeover_out(req: TakeoverRequest, *, handoff: bool = False) -> TakeoverOut:
    valid = req.valid_approvals()
    return TakeoverOut(
        id=req.id, run_id=req.run_id, instrument=req.instrument, message=req.message,
        status=req.status, commands=[a.canonical for a in req.actions], required=req.required,
        approvals_given=[ApprovalOut(kind=a.kind, by=a.by, at=a.at, notes=a.notes)
                         for a in valid],
        approvals_missing=req.missing(), reason=req.reason, step_id=req.step_id,
        created_at=req.created_at, expires_at=req.expires_at, decided_at=req.decided_at,
        outcome=req.outcome, notes=req.notes,
        receipt=req.receipt.model_dump(mode="json") if req.receipt is not None else None,
        supersedes=req.supersedes, superseded_by=req.superseded_by,
        proposal_hash=req.proposal_hash, handoff=req.handoff if handoff else None)
