"""What the tools return: pydantic models (each tool's output schema), camelCase on the wire
as everywhere in bench-gate (fields are set by their Python names)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "Answers",
    "GoalSet",
    "InstrumentInfo",
    "InstrumentState",
    "Instruments",
    "Pending",
    "Problem",
    "QueryResult",
    "Stopped",
    "WriteOutcome",
]


class _Out(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class Problem(_Out):
    """A tool error: what kind, why, and the SCPI error number when there is one."""

    error: str  # refused | not_found | invalid_input | forbidden | conflict | ...
    reason: str
    scpi_code: int | None = None
    hint: str | None = None


class Stopped(_Out):
    """The emergency stop, done: what each instrument was sent and read back."""

    by: str
    door: str
    instruments: dict[str, dict[str, Any]]
    cancelled: list[str]
    suspended: list[str]
    seconds: float
    #: Set when the store could not keep or journal the stop (it is in force all the same).
    store_error: str | None = None


class InstrumentInfo(_Out):
    name: str
    profile: str
    resource: str
    #: Whether the gateway holds the instrument's lock (docs/interlocks.md §2), and the
    #: warning whenever it does not.
    lock: str = "not lockable"
    lock_warning: str | None = None
    #: While another instrument than its profile's answers ``*IDN?``: why every message to
    #: it is refused (expected and actual identity).
    wrong_instrument: str | None = None


class Instruments(_Out):
    instruments: list[InstrumentInfo]


class InstrumentState(_Out):
    """Every field of every channel, read live (``"-"`` is a channel-less instrument)."""

    instrument: str
    idn: str
    at: str
    channels: dict[str, dict[str, str | None]]


class GoalSet(_Out):
    run_id: str
    goal: str
    status: str


class QueryResult(_Out):
    instrument: str
    command: str
    response: str
    run_id: str


class Pending(_Out):
    """A held write: what the operator sees and must approve before anything is sent."""

    takeover_id: str
    required_approvals: list[str]
    approvals_missing: list[str]
    expires_at: str
    commands: list[str]
    operator_sees: dict[str, Any] = Field(
        default_factory=dict, description="the handoff: command, effects in words, risk, "
        "reversibility, the live values it was judged against")


class WriteOutcome(_Out):
    """A write's outcome now: executed (with its receipt), pending, denied (with the
    operator's notes), expired, stale, failed, ambiguous or cancelled."""

    status: str
    takeover_id: str | None = None
    response: str | None = None
    receipt: dict[str, Any] | None = None
    notes: str | None = None
    outcome: str | None = None
    pending: Pending | None = None
    plan_id: str | None = None


class Answers(_Out):
    """An ask and, once the operator answered, the answers (in the order asked)."""

    question_id: str
    status: str  # open | answered | expired | cancelled
    answers: list[dict[str, str | None]] | None = None
    answered_by: str | None = None
    notes: str = ""
    outcome: str | None = None
    expires_at: str
