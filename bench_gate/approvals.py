"""Who may approve what: pure rules over a request, its run, the bench's policy and the
setpoint approvals in force on the channels it energizes.

The deciding gateway applies them at grant; the owning gateway applies them again, with its
own policy, just before it executes (a decision made elsewhere never skips them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .auth import held_at, normalize_name
from .config import PolicyConfig
from .errors import PermissionDenied
from .models import Approval, ApprovalKind, Principal, Run, RunKind, TakeoverRequest
from .store import Store

__all__ = ["Grant", "cover_for", "person", "require_operator", "violation", "withdrawn",
           "withdrawn_words"]


def require_operator(who: Principal) -> None:
    """Deciding, taking over and releasing are for operators and admins."""
    if not who.operates:
        raise PermissionDenied(f"{who.name} is a {who.role.value}; deciding needs an operator")


def person(name: str) -> str:
    """One identity however it is spelled: ``Olga``, ``olga `` and ``OLGA`` are one person
    (the same normalization token names get)."""
    return normalize_name(name)


def withdrawn(approvals: Iterable[Approval], revoked: frozenset[str],
              store: Store | None = None) -> list[Approval]:
    """The approvals given with a token revoked since (``auth.revoked_tokens``): they no
    longer count, wherever they stand (a partial approval, one awaiting a resend, a plan's,
    a setpoint's in force). A revoked token may have been someone else's hands. One kept
    without its token (given before approvals kept theirs) stands, with ``store``, on the
    tokens its people held when it was given (``auth.held_at``)."""
    def tokens(a: Approval) -> Iterable[str]:
        if a.tokens or store is None:
            return a.tokens
        return held_at(store, a.people or [a.by], a.at.isoformat())
    return [a for a in approvals if revoked.intersection(tokens(a))]


def withdrawn_words(gone: list[Approval]) -> str:
    """``the setpoint approval by olga``, for every withdrawn approval, for a reason."""
    return ", ".join(f"the {a.kind.value} approval by {a.by}" for a in gone)


@dataclass(frozen=True, slots=True)
class Grant:
    """One approval kind by one person, given already or about to be."""

    kind: ApprovalKind
    by: str


def violation(req: TakeoverRequest, run: Run, policy: PolicyConfig, grants: list[Grant],
              remembered: dict[int, list[str]]) -> str | None:
    """Why these approvals may not stand under ``policy``, or None.

    - The requester never approves its own request, except an operator's own engineer run
      (the engineer at the bench confirming their own change), and not even that with
      ``independent_approver``.
    - With ``two_person_output_enable``, whoever enables an output differs from whoever
      approves a setpoint in the same request (when it needs both), and from everyone whose
      approval put the setpoint in force on that channel: ``remembered`` maps each channel
      the request switches on to those people, for the fields it does not set itself
      (DESIGN.md rule 3).
    """
    requester = person(run.principal)
    for g in grants:
        if person(g.by) != requester:
            continue
        if run.kind is not RunKind.ENGINEER:
            return (f"{g.by} made this request and cannot approve it: another operator must "
                    "decide")
        if policy.independent_approver:
            return ("this bench requires every approval to come from someone other than the "
                    "requester")
    if not policy.two_person_output_enable:
        return None
    setters = {person(g.by): g.by for g in grants if g.kind is ApprovalKind.SETPOINT}
    enablers = {person(g.by): g.by for g in grants if g.kind is ApprovalKind.OUTPUT_ENABLE}
    both = sorted(enablers[p] for p in set(enablers) & set(setters))
    if both and {ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE} <= set(req.required):
        # One request that needs both halves (an energize, a plan with outputs, *RCL...).
        return (f"{both[0]} cannot approve both the setpoint and the output enable: this "
                "bench requires a second person (two different people for the setpoint and "
                "the output enable)")
    for channel, people in sorted(remembered.items()):
        # The setpoint already in force on a channel this request switches on.
        again = sorted(enablers[p] for p in set(enablers) & {person(x) for x in people})
        if again:
            return (f"{again[0]} approved the setpoint in force on CH{channel} and cannot "
                    "also enable its output: this bench requires a second person (two "
                    "different people for the setpoint and the output enable)")
    return None


def cover_for(req: TakeoverRequest, may_open: Callable[[str], bool]) -> TakeoverRequest:
    """``req`` as someone who may not see every run is shown it: the setpoint cover keeps
    its values, approvers and times, but names no request they may not open (its id would
    only lead to a refusal that names another requester)."""
    cover = req.handoff.get("setpoint_cover")
    if not cover:
        return req
    shown = [{**entry, "fields": [
        f if not f.get("request") or may_open(f["request"]) else {**f, "request": None}
        for f in entry.get("fields", [])]} for entry in cover]
    return req.model_copy(update={"handoff": {**req.handoff, "setpoint_cover": shown}})
