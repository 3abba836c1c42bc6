"""What an approval meant: each ``approval_granted`` event gets the words its approver was
shown before it is hashed into the journal's chain, so the chain holds them too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..models import ApprovalKind, Event, EventType, TakeoverRequest

if TYPE_CHECKING:
    from ..scpi import Profile

__all__ = ["with_meanings"]


def with_meanings(req: TakeoverRequest, events: list[Event]) -> list[Event]:
    """Give each ``approval_granted`` event of ``req`` that names one ``kind`` and has no
    ``meaning`` yet the words its approver was shown (:func:`bench_gate.journal.
    approval_meaning`), before it is hashed into the chain."""
    from ..journal import approval_meaning

    present, cover = _present(req), _cover(req)
    for ev in events:
        if ev.type is EventType.APPROVAL_GRANTED and "meaning" not in ev.data \
                and ev.request_id == req.id and "kind" in ev.data:
            try:
                kind = ApprovalKind(ev.data["kind"])
            except ValueError:
                continue
            ev.data["meaning"] = approval_meaning(kind, req.actions, message=req.message,
                                                  present=present, cover=cover)
    return events


def _profile(req: TakeoverRequest) -> Profile | None:
    from ..scpi import ProfileError, get_profile

    try:
        return get_profile(str(req.handoff.get("profile") or ""))
    except (ProfileError, OSError, KeyError):
        return None


def _present(req: TakeoverRequest) -> list[str]:
    """The present setpoint fields ``req``'s setpoint approval approves as they are."""
    needed = req.handoff.get("setpoint_needed")
    if not needed:
        return []
    from ..handoff import present_words

    return present_words(_profile(req), needed)


def _cover(req: TakeoverRequest) -> list[str]:
    """The approved setpoint ``req``'s output enable stands on, as its approver read it."""
    cover = req.handoff.get("setpoint_cover")
    if not cover:
        return []
    from ..handoff import cover_words

    return cover_words(_profile(req), cover)
