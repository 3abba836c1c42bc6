"""What an approval meant: each ``approval_granted`` event gets the words its approver was
shown before it is hashed into the journal's chain, so the chain holds them too.
"""

from __future__ import annotations

from ..models import ApprovalKind, Event, EventType, TakeoverRequest

__all__ = ["with_meanings"]


def with_meanings(req: TakeoverRequest, events: list[Event]) -> list[Event]:
    """Give each ``approval_granted`` event of ``req`` that names one ``kind`` and has no
    ``meaning`` yet the words its approver was shown (:func:`bench_gate.journal.
    approval_meaning`), before it is hashed into the chain."""
    from ..journal import approval_meaning

    present = _present(req)
    for ev in events:
        if ev.type is EventType.APPROVAL_GRANTED and "meaning" not in ev.data \
                and ev.request_id == req.id and "kind" in ev.data:
            try:
                kind = ApprovalKind(ev.data["kind"])
            except ValueError:
                continue
            ev.data["meaning"] = approval_meaning(kind, req.actions, message=req.message,
                                                  present=present)
    return events


def _present(req: TakeoverRequest) -> list[str]:
    """The present setpoint fields ``req``'s setpoint approval approves as they are."""
    needed = req.handoff.get("setpoint_needed")
    if not needed:
        return []
    from ..handoff import present_words
    from ..scpi import ProfileError, get_profile

    try:
        profile = get_profile(str(req.handoff.get("profile") or ""))
    except (ProfileError, OSError, KeyError):
        profile = None
    return present_words(profile, needed)
