"""Who may approve what: pure rules over a request, its run, the bench's policy and the
setpoint approvals in force on the channels it energizes.

The deciding gateway applies them at grant; the owning gateway applies them again, with its
own policy, just before it executes (a decision made elsewhere never skips them).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from .config import PolicyConfig
from .models import ApprovalKind, Run, RunKind, TakeoverRequest

__all__ = ["Grant", "person", "violation"]


def person(name: str) -> str:
    """One identity however it is spelled: ``Olga``, ``olga `` and ``OLGA`` are one person."""
    return unicodedata.normalize("NFKC", name).casefold().strip()


@dataclass(frozen=True, slots=True)
class Grant:
    """One approval kind by one person, given already or about to be."""

    kind: ApprovalKind
    by: str


def _setpoint_people(req: TakeoverRequest, grants: list[Grant],
                     remembered: dict[int, list[str]]) -> dict[int, set[str]]:
    """For each channel this request energizes: who approved the setpoint that will be in
    force when it turns on. This request's own setpoint approval when it needs one (it sets
    the setpoint, or no approved setpoint matched the live one); else the earlier approval
    remembered for that channel, whoever gave it, in a request, an edit or a plan."""
    own = {person(g.by) for g in grants if g.kind is ApprovalKind.SETPOINT}
    out: dict[int, set[str]] = {}
    for a in req.actions:
        if a.approval is not ApprovalKind.OUTPUT_ENABLE or a.channel is None:
            continue
        if ApprovalKind.SETPOINT in req.required:
            out[a.channel] = set(own)
        else:
            out[a.channel] = {person(p) for p in remembered.get(a.channel, [])}
    return out


def violation(req: TakeoverRequest, run: Run, policy: PolicyConfig, grants: list[Grant],
              remembered: dict[int, list[str]]) -> str | None:
    """Why these approvals may not stand under ``policy``, or None.

    - The requester never approves its own request, except an operator's own engineer run
      (the engineer at the bench confirming their own change), and not even that with
      ``independent_approver``.
    - With ``two_person_output_enable``, whoever enables an output differs from whoever
      approved the setpoint in force on that channel (DESIGN.md rule 3).
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
    enablers = {person(g.by): g.by for g in grants if g.kind is ApprovalKind.OUTPUT_ENABLE}
    for channel, people in sorted(_setpoint_people(req, grants, remembered).items()):
        both = sorted(enablers[p] for p in set(enablers) & people)
        if both:
            return (f"{both[0]} approved the setpoint in force on CH{channel} and cannot also "
                    "enable its output: this bench requires a second person (two different "
                    "people for the setpoint and the output enable)")
    return None
