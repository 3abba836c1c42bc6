"""Couplings: fields that, while on, make an instrument copy one channel's fields into
another's (``FieldSpec.copies``: the E36312A's tracking and pairing, the DP832's tracking,
the E3631A's ±25 V tracking). The envelope judges the followers with the channel they
follow. Pure functions: no I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation

from .scpi import Profile, format_number
from .scpi.units import magnitude

__all__ = ["carried", "follow", "followers", "joined", "switched_on"]


def _key(channel: int, field: str) -> str:
    return f"ch{channel}.{field}"


def _channel_of(key: str) -> int | None:
    head = key.removeprefix("-").split(".", 1)[0]
    return int(head[2:]) if head.startswith("ch") and head[2:].isdigit() else None


def _negate(value: str) -> str:
    try:
        return format_number(-Decimal(value))
    except InvalidOperation:
        return value  # unreadable stays unreadable: the envelope counts it outside


def follow(profile: Profile, state: dict[str, str], changed: str | None = None
           ) -> dict[str, str]:
    """``state`` with the copies a coupling makes while it is on (``FieldSpec.copies``: the
    E36312A's tracking sets CH3's voltage with CH2's). A coupling whose state is unread
    counts as on: a prediction that leaves a channel out fails open. ``changed``: copy from
    that key only, so a coupling both ways (the DP832's) copies the value just set."""
    out = dict(state)
    for name, spec in profile.fields.items():
        if not spec.copies:
            continue
        if not _coupled(profile, name, out):
            continue
        for source, targets in spec.copies.items():
            if source in out and changed in (None, source):
                for target in targets:  # "-ch3.voltage": the opposite sign (E3631A)
                    out[target.removeprefix("-")] = (_negate(out[source])
                                                     if target.startswith("-") else out[source])
    return out


def switched_on(profile: Profile, state: Mapping[str, str], name: str) -> dict[str, str]:
    """``state`` once coupling ``name`` comes on: every copy it makes at once (E36300 guide,
    OUTPut:TRACk: CH3 takes CH2's voltage setpoint). Where it copies both ways (the DP832's
    CH1 and CH2, the E3631A's ±25 V), which one the other takes is the instrument's: each
    such field is judged at the farther of its own value and the one it may take."""
    out = dict(state)
    copies = profile.fields[name].copies
    for source, targets in copies.items():
        if source not in state:
            continue
        for target in targets:
            key = target.removeprefix("-")
            value = _negate(state[source]) if target.startswith("-") else state[source]
            if key in copies:  # a source too: it may keep its own value
                here, there = magnitude(out.get(key)), magnitude(value)
                if here is not None and there is not None and here >= there:
                    continue
            out[key] = value
    return out


def carried(profile: Profile, state: Mapping[str, str]) -> dict[str, str]:
    """``state`` with each level stored for a trigger (``points``) also on every channel a
    coupling that may be on copies its field into: a trigger applies it as a setpoint, and
    the coupling moves the follower with it (DP800 guide, :OUTPut:TRACk). The farther level
    stays; an unreadable one is carried as it is (outside)."""
    out = dict(state)
    for name, spec in profile.fields.items():
        if not spec.copies:  # not a coupling: nothing to carry (and nothing to ask of it)
            continue
        for source, targets in spec.copies.items() if _coupled(profile, name, state) else ():
            channel, field = _channel_of(source), source.split(".", 1)[-1]
            for stored, points in profile.fields.items():
                raw = state.get(_key(channel, stored)) if channel is not None else None
                if raw is None or not points.points or (
                        profile.limit_of(stored) != profile.limit_of(field)):
                    continue
                for to in filter(None, (_channel_of(t.removeprefix("-")) for t in targets)):
                    here, there = magnitude(out.get(_key(to, stored))), magnitude(raw)
                    if here is None or there is None or there > here:
                        out[_key(to, stored)] = raw
    return out


def _coupled(profile: Profile, name: str, state: Mapping[str, str]) -> bool:
    """Whether coupling field ``name`` may be on in ``state``: on, or unread (fails closed)."""
    spec = profile.fields[name]
    flags = [state.get(_key(ch, name)) for ch in (spec.channels or tuple(profile.channels))]
    return not all(flag in ("0", "OFF", "False") for flag in flags)


def followers(profile: Profile, channels: set[int],
              states: Iterable[Mapping[str, str]] | None = None) -> set[int]:
    """The channels a coupling may copy into from ``channels`` (judged with them): with
    ``states`` (the live one and those a write passes through), only a coupling that may be
    on in one of them, so a channel no coupling joins is not judged for a write elsewhere."""
    seen = list(states) if states is not None else None
    found: set[int] = set()
    for name, spec in profile.fields.items():
        if not spec.copies or (seen is not None
                               and not any(_coupled(profile, name, st) for st in seen)):
            continue
        for source, targets in spec.copies.items():
            if _channel_of(source) in channels:
                found.update(c for t in targets if (c := _channel_of(t)) is not None)
    return found - channels


def joined(profile: Profile, field: str) -> set[int]:
    """The channels a coupling field's copies name, the ones it copies from and into."""
    keys = [k for source, targets in profile.fields[field].copies.items()
            for k in (source, *targets)]
    return {ch for k in keys if (ch := _channel_of(k.removeprefix("-"))) is not None}
