"""The envelope as a rule about instrument state (DESIGN.md, "Envelope").

A channel that drives the DUT (its profile's safe-action field is on) must have every field
the bench limits inside its limit, whether or not a write touches that field. The gateway
checks this on the state a write will produce (the live snapshot plus every action) before
anything is sent, and on the state read back after every write; a breach found after a write
triggers the profile's safe action at once. Pure functions: no I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from .config import ChannelLimits
from .couplings import follow, followers, joined
from .models import Action
from .scpi import Profile, classify, format_number
from .scpi.units import magnitude

__all__ = ["SETPOINT_KEYS", "Breach", "action_breaches", "bounded", "breaches",
           "enveloped_fields", "guards", "in_force", "judged_modes", "live_words",
           "magnitude", "modes", "no_worse", "off_modes", "readable_fields", "revived",
           "safe_commands", "safe_fields", "setpoint_fields", "summary", "unbounded"]


#: The envelope keys a channel's setpoint is made of (an approved setpoint remembers them).
SETPOINT_KEYS = ("voltage", "current")


def _key(channel: int, field: str) -> str:
    return f"ch{channel}.{field}"


@dataclass(frozen=True, slots=True)
class Breach:
    """One enveloped field outside its limit on a channel that is, or will be, energized."""

    channel: int
    field: str
    value: str | None  # None: the field could not be read, so it cannot be shown inside
    limit: Decimal
    #: A mode in which the limits bound nothing (``bounded_when``), not a level.
    mode: bool = False
    #: On a channel whose output is off: the output-off state that still holds the field
    #: (``FieldSpec.off_holds``), in words.
    held: str = ""

    def words(self, profile: Profile) -> str:
        spec = profile.fields.get(self.field)
        label = spec.label if spec is not None else self.field
        unit = f" {spec.unit}" if spec is not None and spec.unit else ""
        shown = "unknown" if self.value is None else f"{self.value}{unit}"
        if spec is not None and spec.guards is not None:
            return (f"CH{self.channel} {label} is {'unknown' if self.value is None else 'OFF'}: "
                    f"the bench's {spec.guards} limit bounds this channel only with it on")
        if spec is not None and spec.bounded_when:
            return (f"CH{self.channel} {label} is {shown}: the bench limits bound this "
                    f"channel only with {label} {' or '.join(spec.bounded_when)}")
        held = f" ({self.held})" if self.held else ""
        return (f"CH{self.channel} {label} is {shown}, above the bench limit of "
                f"{format_number(self.limit)}{unit}{held}")

    def as_json(self) -> dict[str, str | int | None]:
        out: dict[str, str | int | None] = {
            "channel": self.channel, "field": self.field, "value": self.value,
            "limit": format_number(self.limit)}
        if self.held:
            out["held"] = self.held
        return out


def _limits_of(limits: ChannelLimits) -> dict[str, Decimal]:
    return {name: value for name, value in limits.model_dump().items()
            if isinstance(value, Decimal)}


def bounded(profile: Profile, limits: ChannelLimits) -> dict[str, Decimal]:
    """Every field of the profile that bounds what reaches the DUT, with the limit that
    applies to it: a field named like an envelope key, or one that names its key
    (``envelope: voltage`` on an SMU's voltage limit while it sources current). Each is
    judged whatever the instrument's function: the function can change without a write
    the gateway predicts (the front panel, another client)."""
    keys = _limits_of(limits)
    return {name: keys[key] for name, spec in profile.fields.items()
            if not spec.measured and (key := profile.limit_of(name)) in keys}


def unbounded(profile: Profile, limits: dict[int, ChannelLimits]) -> list[str]:
    """Every limit of an instrument's envelope that would bound nothing on its profile: a
    key no field of the profile is bounded by (an ``ovp`` on a profile that reads no OVP
    level), or a channel the profile does not have. Such a limit looks enforced and is not,
    so the gateway refuses to start with it."""
    keys = {profile.limit_of(name) for name, spec in profile.fields.items() if not spec.measured}
    out: list[str] = []
    for channel, channel_limits in sorted(limits.items()):
        if channel not in profile.channels:
            have = ", ".join(str(c) for c in profile.channels) or "none"
            out.append(f"channel {channel}: the {profile.name} profile has no channel "
                       f"{channel} (its channels: {have})")
            continue
        out.extend(f"channel {channel} {key}: no field of the {profile.name} profile is "
                   f"bounded by {key} (the instrument's {key} is never read)"
                   for key in _limits_of(channel_limits) if key not in keys)
    return out


def setpoint_fields(profile: Profile) -> tuple[str, ...]:
    """A channel's setpoint on this instrument: every field the envelope's voltage or
    current bounds (an SMU's level and limit in both source functions), else those two."""
    return tuple(f for f, spec in profile.fields.items() if not spec.measured
                 and not spec.points and profile.limit_of(f) in SETPOINT_KEYS) or SETPOINT_KEYS


def enveloped_fields(profile: Profile, limits: dict[int, ChannelLimits]
                     ) -> list[tuple[int, str]]:
    """Every field a read-back must cover to judge the envelope: on each limited channel,
    the field that says it is energized and every field with a limit."""
    out: list[tuple[int, str]] = []
    safe = profile.safe_action
    for channel in sorted(limits):
        if channel not in profile.channels:
            continue
        names = ([safe.field] if safe is not None else []) + list(
            bounded(profile, limits[channel])) + off_modes(
            profile, channel) + guards(profile, limits[channel], channel)
        out.extend((channel, f) for f in dict.fromkeys(names))
        out.extend(m for m in modes(profile, channel) if m not in out)
    return out


def readable_fields(profile: Profile, limits: dict[int, ChannelLimits]
                    ) -> list[tuple[int, str]]:
    """The enveloped fields the profile can read on their channel. One it says a channel
    lacks (the SPD3303X's fixed CH3: no setpoint, no status bit) is never asked: it has no
    query that answers, so each ask only waits out the link's timeout and drops the
    connection, holding the lane. Left out of a reading, it counts as unreadable: outside."""
    return [(ch, f) for ch, f in enveloped_fields(profile, limits) if profile.has_field(f, ch)]


def modes(profile: Profile, channel: int) -> list[tuple[int, str]]:
    """The fields that say whether the channel's limits bound it at all (``bounded_when``),
    each with the channel it is read on: the channel's own, or, for a coupling read on one
    channel that joins others (a pairing: ``copies``), that channel's, on every channel
    it joins."""
    out: list[tuple[int, str]] = []
    for f, spec in profile.fields.items():
        if not spec.bounded_when:
            continue
        if profile.has_field(f, channel):
            out.append((channel, f))
        elif channel in joined(profile, f):
            out.extend((ch, f) for ch in profile.channels if profile.has_field(f, ch))
    return out


def guards(profile: Profile, limits: ChannelLimits, channel: int) -> list[str]:
    """The channel's fields that say whether a protection its limits bound acts (``guards``)."""
    keys = _limits_of(limits)
    return [f for f, spec in profile.fields.items()
            if spec.guards in keys and profile.has_field(f, channel)]


def judged_modes(profile: Profile, channel: int) -> list[str]:
    """Every field of the channel the envelope judges as a mode, not a level: a write that
    sets one is judged before it is sent, like a setpoint."""
    return [f for f, spec in profile.fields.items() if profile.has_field(f, channel) and (
        spec.bounded_when or spec.off_holds or spec.guards)]


def off_modes(profile: Profile, channel: int) -> list[str]:
    """The channel's fields that say what it holds while its output is off (``off_holds``)."""
    return [f for f, spec in profile.fields.items()
            if spec.off_holds and profile.has_field(f, channel)]


def in_force(profile: Profile, state: Mapping[str, str], channel: int
             ) -> tuple[frozenset[str] | None, str]:
    """The bounded fields in force on the channel, and why, in words. None: every one (the
    channel is, or may be, energized). An off channel holds what its output-off states hold
    (``FieldSpec.off_holds``; the 2450 keeps one per source function: both are judged, as
    the function may change at the panel); one unread or at a value the profile does not
    list holds everything: judged as energized."""
    if _energized(profile, state, channel):
        return None, ""
    held: set[str] = set()
    words: list[str] = []
    for name in off_modes(profile, channel):
        spec = profile.fields[name]
        raw = state.get(_key(channel, name))
        # A value as the profile writes a choice (``HIMPedance``): its short or long form.
        table = {form: v for k, v in spec.off_holds.items()
                 for form in (k.upper(), "".join(c for c in k if not c.islower()))}
        fields = table.get(raw.strip().upper()) if raw is not None else None
        if fields is None:
            return None, (f"the output is off, but {spec.label} is "
                          f"{'unknown' if raw is None else raw}: judged as on")
        if fields:
            held.update(fields)
            words.append(f"{spec.label} {raw}")
    if not held:
        return frozenset(), ""
    kept = ", ".join(profile.fields[f].label for f in profile.fields if f in held)
    return frozenset(held), (f"the output is off, but {' and '.join(words)} keeps the "
                             f"{kept} in force")


def safe_fields(profile: Profile, channel: int) -> list[str]:
    """What a safe action is read back by on the channel: the field that says it is on and
    its output-off states (the safe action leaves them holding nothing)."""
    safe = profile.safe_action
    return ([safe.field] if safe is not None else []) + off_modes(profile, channel)


def live_words(profile: Profile, state: Mapping[str, str], channels: Iterable[int]) -> str:
    """The channels of ``state`` a safe action did not leave safe, in words ("" when each
    is): one that reads on (or unread), or off in an output-off state that still holds a
    bounded field."""
    out = []
    for ch in channels:
        held, why = in_force(profile, state, ch)
        if held is None and not why:
            out.append(f"CH{ch} still reads on")
        elif held is None or held:
            out.append(f"CH{ch}: {why}")
    return "; ".join(out)


def _unbounded_mode(profile: Profile, field: str, raw: str | None) -> bool:
    allowed = {v.upper() for v in profile.fields[field].bounded_when}
    return raw is None or raw.strip().upper() not in allowed


def _energized(profile: Profile, state: Mapping[str, str], channel: int) -> bool:
    """True when the channel drives (or may drive) the DUT. A profile without a safe-action
    field cannot say, and an unread output may be on: both count as energized."""
    safe = profile.safe_action
    if safe is None:
        return True
    value = state.get(_key(channel, safe.field))
    return value is None or value not in ("0", "OFF", "False")


def breaches(profile: Profile, limits: dict[int, ChannelLimits], state: dict[str, str],
             channels: set[int] | None = None) -> list[Breach]:
    """Every enveloped field outside its limit on an energized channel of ``state``.

    ``state`` maps ``ch1.voltage`` to a rendered value. Only channels present in ``state``
    (or those in ``channels``, when given) are judged: a state that does not mention a
    channel says nothing about it.
    """
    out: list[Breach] = []
    for channel in sorted(limits):
        mentioned = any(k.startswith(f"ch{channel}.") for k in state)
        if (channels is not None and channel not in channels) or (
                channels is None and not mentioned):
            continue
        held, why = in_force(profile, state, channel)
        if held is not None and not held:
            continue
        for field, limit in bounded(profile, limits[channel]).items():
            if held is not None and field not in held:
                continue
            raw = state.get(_key(channel, field))
            # A limit bounds the magnitude: a bipolar source (an SMU, a negative supply
            # output) at -20 V is as far from 0 as at +20 V; a list, its farthest point.
            value = magnitude(raw)
            if value is None or value > limit:
                out.append(Breach(channel, field, raw, limit, held=why))
        if not _energized(profile, state, channel):
            continue
        out.extend(Breach(channel, field, raw, Decimal(0), mode=True)
                   for field in guards(profile, limits[channel], channel)
                   if (raw := state.get(_key(channel, field))) not in ("1", "ON", "True"))
        out.extend(Breach(channel, field, raw, Decimal(0), mode=True)
                   for read_on, field in modes(profile, channel)
                   if _unbounded_mode(profile, field, raw := state.get(_key(read_on, field))))
    return out


def revived(profile: Profile, limits: dict[int, ChannelLimits], actions: list[Action],
            states: list[dict[str, str]]) -> tuple[str, list[Breach]]:
    """A protection clear (``revives``) brings its channel's output back to the state it
    was in before the trip, at whatever levels the channel holds then: judged as on from
    the clear to the end of the message (until a unit sets the output itself), whatever
    the output reads now. ``states``: the state after each action (one pass, linear in the
    units: a message of clears is judged in one walk). The clear that revived a channel
    found outside, with the breaches; ("", []) when none is."""
    safe = profile.safe_action
    if safe is None or not limits:
        return "", []
    on: dict[int, str] = {}  # channel -> the clear that switched it back on
    for a, after in zip(actions, states, strict=True):
        form = profile.form_of(a.canonical) if a.canonical else None
        if form is not None and form.revives:
            for ch in ({a.channel} if a.channel is not None else set(limits)) & set(limits):
                on.setdefault(ch, a.canonical)
        elif a.field == safe.field and a.channel in on:
            del on[a.channel]  # the unit sets the output itself from here
        if not on:
            continue
        state = dict(after)
        for ch in on:
            state[_key(ch, safe.field)] = "1"
        found = breaches(profile, limits, follow(profile, state),
                         set(on) | followers(profile, set(on)))
        if found:
            return next((on[b.channel] for b in found if b.channel in on),
                        next(iter(on.values()))), found
    return "", []


def action_breaches(profile: Profile, limits: dict[int, ChannelLimits],
                    actions: list[Action]) -> list[Breach]:
    """Every action that sets an enveloped field above its limit, energized or not (an
    edit or a decision made under another bench's envelope included)."""
    out = []
    for a in actions:
        if a.channel is None or a.field is None or a.new is None or a.channel not in limits:
            continue
        limit = _limits_of(limits[a.channel]).get(profile.limit_of(a.field))
        if limit is None:
            continue
        value = magnitude(a.new)  # a word (MAX) or no finite number: cannot be shown inside
        if value is None or value > limit:
            out.append(Breach(a.channel, a.field, a.new, limit))
    return out


def no_worse(now: Breach, before: Breach | None) -> bool:
    """True when ``now`` was already there before, at the same value or a safer one."""
    if before is None:
        return False
    if now.mode and before.mode:
        return now.value is not None and now.value == before.value  # the same mode
    now_at, before_at = magnitude(now.value), magnitude(before.value)
    return now_at is not None and before_at is not None and now_at <= before_at


def summary(profile: Profile, found: list[Breach]) -> str:
    return "; ".join(b.words(profile) for b in found)


def safe_commands(profile: Profile, channels: list[int]) -> list[str]:
    """The canonical safe action for each channel, rendered by the classifier like any
    command the gateway sends."""
    safe = profile.safe_action
    if safe is None:
        return []
    out: list[str] = []
    for channel in channels:
        out.extend(u.canonical for u in
                   classify(safe.command.format(ch=channel), profile.name).units)
    return out
