"""The takeover request's state machine, as one table checked at import.

    pending ──grant(all kinds)──▶ approved ──▶ executing ──▶ executed | failed | ambiguous
       │                              └──recheck differs──▶ stale
       ├──deny──▶ denied   ├──time──▶ expired   ├──cancel──▶ cancelled
       └──recheck differs──▶ stale
"""

from __future__ import annotations

import enum

from .models import Status

__all__ = ["INITIAL", "TERMINAL", "TRANSITIONS", "UNDECIDED", "Event", "Outcome", "check_table",
           "target"]


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
}


def target(status: Status, event: Event) -> Status | None:
    """The status ``event`` leads to from ``status``, or None if the move is not allowed."""
    return TRANSITIONS.get((status, event))


def check_table() -> None:
    """One initial state, every state reachable, no exits from terminal states."""
    reached = {INITIAL}
    frontier = [INITIAL]
    while frontier:
        state = frontier.pop()
        for (src, _), dst in TRANSITIONS.items():
            if src == state and dst not in reached:
                reached.add(dst)
                frontier.append(dst)
    unreachable = set(Status) - reached
    if unreachable:
        raise AssertionError(f"unreachable statuses: {sorted(unreachable)}")
    exits = [(s, e) for (s, e) in TRANSITIONS if s in TERMINAL]
    if exits:
        raise AssertionError(f"terminal statuses with exits: {exits}")


check_table()
