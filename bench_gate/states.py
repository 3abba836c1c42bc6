"""Every lifecycle of the gateway as one table each, checked at import: one initial state,
every state reachable, no exits from a terminal state.

The takeover request::

    pending ──grant(all kinds)──▶ approved ──▶ executing ──▶ executed | failed | ambiguous
       │                              └──recheck differs──▶ stale
       ├──deny──▶ denied   ├──time──▶ expired   ├──cancel──▶ cancelled
       └──recheck differs──▶ stale

A run (``RUNS``)::

    active ──take over──▶ taken_over ──release──▶ active
       └──denials──▶ suspended ──release──▶ active        (any of them) ──close──▶ closed

A plan (``PLANS``)::

    pending ──its request executes──▶ active ──▶ expired | exhausted | revoked
       └──its request is denied, expires or is cancelled──▶ denied;  ──revoke──▶ revoked

A question (``QUESTIONS``)::

    open ──▶ answered | expired | cancelled
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from .errors import TransitionError
from .models import RunStatus, Status

__all__ = ["INITIAL", "PLANS", "QUESTIONS", "RUNS", "TERMINAL", "TRANSITIONS", "UNDECIDED",
           "Event", "Machine", "Outcome", "PlanEvent", "PlanStatus", "QuestionEvent",
           "QuestionStatus", "RunEvent", "check_machine", "check_table", "target"]

S = TypeVar("S", bound=enum.Enum)
E = TypeVar("E", bound=enum.Enum)


class Event(enum.StrEnum):
    APPROVE = "approve"  # the last required approval arrived
    DENY = "deny"
    EXPIRE = "expire"
    CANCEL = "cancel"
    START = "start"  # the executor takes it
    GO_STALE = "go_stale"  # the live recheck differs
    FINISH = "finish"
    FAIL = "fail"
    LOSE_TRACK = "lose_track"  # the outcome cannot be read back


INITIAL = Status.PENDING
TERMINAL = frozenset({Status.EXECUTED, Status.FAILED, Status.AMBIGUOUS, Status.DENIED,
                      Status.EXPIRED, Status.CANCELLED, Status.STALE})

#: Not decided yet: a requester waiting on one of these keeps waiting.
UNDECIDED = frozenset(Status) - TERMINAL


class Outcome(enum.StrEnum):
    """What a submit came to: it ran, it waits for a person, it was refused, or the status
    its request ended in (an idempotent retry of a decided request)."""

    # Deliberate declarative repetition: every request Status, spelled again so that a
    # type checker knows the members, plus REFUSED (a refusal files no request).

    EXECUTED = "executed"
    PENDING = "pending"
    REFUSED = "refused"
    APPROVED = "approved"
    EXECUTING = "executing"
    FAILED = "failed"
    AMBIGUOUS = "ambiguous"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    STALE = "stale"


TRANSITIONS: dict[tuple[Status, Event], Status] = {
    (Status.PENDING, Event.APPROVE): Status.APPROVED,
    (Status.PENDING, Event.DENY): Status.DENIED,
    (Status.PENDING, Event.EXPIRE): Status.EXPIRED,
    (Status.PENDING, Event.CANCEL): Status.CANCELLED,
    (Status.PENDING, Event.GO_STALE): Status.STALE,
    (Status.APPROVED, Event.START): Status.EXECUTING,
    (Status.APPROVED, Event.GO_STALE): Status.STALE,
    (Status.APPROVED, Event.CANCEL): Status.CANCELLED,
    (Status.APPROVED, Event.FAIL): Status.FAILED,
    # Approved, but its bench was away until after the expiry: never run late.
    (Status.APPROVED, Event.EXPIRE): Status.EXPIRED,
    (Status.EXECUTING, Event.FINISH): Status.EXECUTED,
    (Status.EXECUTING, Event.FAIL): Status.FAILED,
    (Status.EXECUTING, Event.LOSE_TRACK): Status.AMBIGUOUS,
    (Status.EXECUTING, Event.GO_STALE): Status.STALE,
    # Its expiry passed while the write waited for its lane turn: nothing was sent.
    (Status.EXECUTING, Event.EXPIRE): Status.EXPIRED,
}


def target(status: Status, event: Event) -> Status | None:
    """The status ``event`` leads to from ``status``, or None if the move is not allowed."""
    return TRANSITIONS.get((status, event))


def check_machine(name: str, states: type[S], initial: S, terminal: frozenset[S],
                  transitions: Mapping[tuple[S, E], S]) -> None:
    """One initial state, every state reachable, no exits from terminal states."""
    reached = {initial}
    frontier = [initial]
    while frontier:
        state = frontier.pop()
        for (src, _), dst in transitions.items():
            if src == state and dst not in reached:
                reached.add(dst)
                frontier.append(dst)
    unreachable = set(states) - reached
    if unreachable:
        raise AssertionError(f"{name}: unreachable statuses: "
                             f"{sorted(s.value for s in unreachable)}")
    exits = [(s.value, e.value) for (s, e) in transitions if s in terminal]
    if exits:
        raise AssertionError(f"{name}: terminal statuses with exits: {exits}")


def check_table() -> None:
    """The request table's check (see :func:`check_machine`)."""
    check_machine("request", Status, INITIAL, frozenset(TERMINAL), TRANSITIONS)


@dataclass(frozen=True)
class Machine(Generic[S, E]):
    """One lifecycle: its states, the initial one, the terminal ones and every move."""

    name: str
    states: type[S]
    initial: S
    terminal: frozenset[S]
    transitions: Mapping[tuple[S, E], S]

    def target(self, state: S, event: E) -> S | None:
        return self.transitions.get((state, event))

    def move(self, subject: str, state: S, event: E, detail: str = "") -> S:
        """The state ``event`` leads to, or TransitionError naming the state and event."""
        dst = self.target(state, event)
        if dst is None:
            raise TransitionError(subject, str(state.value), str(event.value).replace("_", " "),
                                  detail)
        return dst

    def check(self) -> None:
        check_machine(self.name, self.states, self.initial, self.terminal, self.transitions)


# ------------------------------------------------------------------------- runs
class RunEvent(enum.StrEnum):
    TAKE_OVER = "take_over"  # an operator holds every write
    RELEASE = "release"
    SUSPEND = "suspend"  # denials in a row, or an emergency stop
    CLOSE = "close"  # the requester is gone, or closed it


_OPEN_RUNS = (RunStatus.ACTIVE, RunStatus.TAKEN_OVER, RunStatus.SUSPENDED)
RUNS: Machine[RunStatus, RunEvent] = Machine(
    "run", RunStatus, RunStatus.ACTIVE, frozenset({RunStatus.CLOSED}), {
        **{(s, RunEvent.TAKE_OVER): RunStatus.TAKEN_OVER for s in _OPEN_RUNS},
        (RunStatus.TAKEN_OVER, RunEvent.RELEASE): RunStatus.ACTIVE,
        (RunStatus.SUSPENDED, RunEvent.RELEASE): RunStatus.ACTIVE,
        (RunStatus.ACTIVE, RunEvent.SUSPEND): RunStatus.SUSPENDED,
        (RunStatus.TAKEN_OVER, RunEvent.SUSPEND): RunStatus.SUSPENDED,
        **{(s, RunEvent.CLOSE): RunStatus.CLOSED for s in _OPEN_RUNS},
    })


# ------------------------------------------------------------------------- plans
class PlanStatus(enum.StrEnum):
    PENDING = "pending"  # waiting for its approvals
    ACTIVE = "active"
    REVOKED = "revoked"
    EXPIRED = "expired"
    EXHAUSTED = "exhausted"  # every write used
    DENIED = "denied"  # its request was denied, expired, or cancelled


class PlanEvent(enum.StrEnum):
    ACTIVATE = "activate"  # its request executed
    DENY = "deny"  # its request was denied, expired or cancelled
    REVOKE = "revoke"  # an operator, or its run closed
    EXPIRE = "expire"
    EXHAUST = "exhaust"  # its last write was spent


PLANS: Machine[PlanStatus, PlanEvent] = Machine(
    "plan", PlanStatus, PlanStatus.PENDING,
    frozenset({PlanStatus.REVOKED, PlanStatus.EXPIRED, PlanStatus.EXHAUSTED,
               PlanStatus.DENIED}), {
        (PlanStatus.PENDING, PlanEvent.ACTIVATE): PlanStatus.ACTIVE,
        (PlanStatus.PENDING, PlanEvent.DENY): PlanStatus.DENIED,
        (PlanStatus.PENDING, PlanEvent.REVOKE): PlanStatus.REVOKED,
        (PlanStatus.ACTIVE, PlanEvent.REVOKE): PlanStatus.REVOKED,
        # Its request failed after the plan was activated (it never finished).
        (PlanStatus.ACTIVE, PlanEvent.DENY): PlanStatus.DENIED,
        (PlanStatus.ACTIVE, PlanEvent.EXPIRE): PlanStatus.EXPIRED,
        (PlanStatus.ACTIVE, PlanEvent.EXHAUST): PlanStatus.EXHAUSTED,
    })


# ------------------------------------------------------------------------- questions
class QuestionStatus(enum.StrEnum):
    OPEN = "open"
    ANSWERED = "answered"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class QuestionEvent(enum.StrEnum):
    ANSWER = "answer"
    EXPIRE = "expire"
    CANCEL = "cancel"  # its run closed


QUESTIONS: Machine[QuestionStatus, QuestionEvent] = Machine(
    "question", QuestionStatus, QuestionStatus.OPEN,
    frozenset({QuestionStatus.ANSWERED, QuestionStatus.EXPIRED, QuestionStatus.CANCELLED}), {
        (QuestionStatus.OPEN, QuestionEvent.ANSWER): QuestionStatus.ANSWERED,
        (QuestionStatus.OPEN, QuestionEvent.EXPIRE): QuestionStatus.EXPIRED,
        (QuestionStatus.OPEN, QuestionEvent.CANCEL): QuestionStatus.CANCELLED,
    })


check_table()
for _machine in (RUNS, PLANS, QUESTIONS):
    _machine.check()
