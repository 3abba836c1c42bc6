"""A recall judged before it is sent (invariant 4): the stored state the gateway recorded
when it was saved (memories.py), each field a profile does not say the recall restores at
its stored and its live value both, and every state the units after it pass through. A
slot the gateway did not see saved, or a state loaded from a file, cannot be judged, so on
an instrument with envelope limits it is refused (-222) and never sent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import couplings, envelope
from .errors import Refused
from .memories import memory_of, mixes, stored_state, trusted
from .models import Action, Snapshot
from .scpi import Profile

__all__ = ["JUDGED_STATES", "judge_recalls"]

#: The most states a recall's mixes and the units after it make (memories.MIXES mixes,
#: each through every unit after the recall); more is refused, never judged for seconds.
JUDGED_STATES = 16384

#: ``Snapshots.proposed``: the state actions leave from a snapshot.
Proposed = Callable[[list[Action], Snapshot, Profile], dict[str, str]]


def judge_recalls(profile: Profile, limits: dict[int, Any], actions: list[Action],
                  snap: Snapshot, proposed: Proposed) -> list[tuple[str, str]]:
    """Raise Refused (-222) for a recall in ``actions`` that cannot be judged or may leave
    the instrument outside; return the recalls (canonical text, slot or file key)."""
    recalls = [(a.canonical, m[1]) for a in actions
               if (m := memory_of(profile, a.canonical)) is not None and m[0] == "recall"]
    unknown = [(c, key) for c, key in recalls if key not in snap.recalled]
    files = [(c, key) for c, key in unknown if not trusted(key)]
    if files and limits:
        raise Refused(-222, f"{files[0][0]} loads a stored state from a file "
                      f"({files[0][1]}); the instrument decides which file a name means "
                      "(its current folder, drive, case), so no record can say what it "
                      "holds and the envelope cannot be judged before it runs; save and "
                      "recall a numbered slot through the gateway instead (*SAV, *RCL); "
                      "nothing was sent")
    if unknown and limits:
        raise Refused(-222, f"{unknown[0][0]} brings back a stored state ({unknown[0][1]}) "
                      "the gateway did not see saved (saved at the front panel, by another "
                      "program, on another instrument, or never), so the envelope cannot "
                      "be judged before it runs; save the state through the gateway "
                      "first, then recall it; nothing was sent")
    for canonical, key in recalls:
        if key in snap.recalled and limits:
            _judge(profile, limits, actions, snap, canonical, key, proposed)
    return recalls


def _judge(profile: Profile, limits: dict[int, Any], actions: list[Action], snap: Snapshot,
           canonical: str, key: str, proposed: Proposed) -> None:
    """A recall leaves the fields its profile says it restores as recorded, and may
    leave any mix of the state before it and the record in the others (an instrument's
    saved state is its own: IEEE 488.2 §10.29): each mix is judged on every channel."""
    at = next(i for i, a in enumerate(actions) if a.canonical == canonical)
    sure, unsure = stored_state(profile, canonical, snap.recalled[key])
    mixed = mixes(profile, {**proposed(actions[:at], snap, profile), **sure}, unsure)
    if mixed is None:
        raise Refused(-222, f"{canonical} brings back a state ({key}) too different from "
                      "the live one to judge every mix of the two; switch the outputs "
                      "off first; nothing was sent")
    rest = actions[at + 1:]
    after = f"{canonical} and the units after it" if rest else canonical
    every = list(mixed)
    if len(every) * (len(rest) + 1) > JUDGED_STATES:
        raise Refused(-222, f"{canonical} is followed by too many units to judge each "
                      "state they pass through from every state the recall may leave; "
                      "send them in a message of their own; nothing was sent")
    for mix in every:
        # The units after it run on whatever the recall left: each state they pass
        # through, from each mix.
        states = [mix]
        for a in rest:
            states.append(proposed([a], snap.model_copy(
                update={"values": states[-1], "recalled": {}}), profile))
        found = next((b for state in states if (b := envelope.breaches(
            profile, limits, couplings.follow(profile, state), set(limits)))), [])
        if found:
            raise Refused(-222, f"{after} may leave the instrument outside the "
                          f"envelope: {envelope.summary(profile, found)} ({key} as the "
                          "gateway recorded it, each field judged at its stored or its "
                          "live value, since an instrument need not restore every field "
                          "it stored); nothing was sent")
