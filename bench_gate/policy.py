"""Decide what a classified message needs: pass, refuse, or hold for which approvals.

Pure functions of the classification, the envelope and the policy configuration.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from decimal import Decimal

from .config import ChannelLimits, PolicyConfig
from .models import ApprovalKind
from .scpi import Classification, Effect, Profile, Unit, format_number, get_profile

__all__ = ["Decision", "Verdict", "approval_for", "decide", "envelope_breach",
           "replaces_state", "required_for", "unpredictable"]

#: Every approval kind: what a unit whose effect cannot be predicted needs (DESIGN.md rule 8).
EVERY_APPROVAL = (ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE, ApprovalKind.STATE)


class Verdict(enum.Enum):
    PASS = "pass"  # reads, selections, harmless writes, measure-config: run now
    REFUSE = "refuse"  # forbidden, or outside the envelope: never runs
    HOLD = "hold"  # a person decides


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    required: tuple[ApprovalKind, ...] = ()
    code: int = 0
    reason: str = ""


def approval_for(unit: Unit, policy: PolicyConfig) -> ApprovalKind | None:
    """The approval kind a unit needs, or None if it may run unattended."""
    effect = unit.effect
    if effect in (Effect.READ, Effect.SELECT, Effect.HARMLESS, Effect.MEASURE_CONFIG):
        return None  # measure-config: a meter's passive settings, journaled
    if effect is Effect.EXCITES:
        return ApprovalKind.STATE  # the meter drives the DUT: a person says it may
    if effect is Effect.SETPOINT:
        return ApprovalKind.SETPOINT
    if effect is Effect.OUTPUT:
        if unit.value is True:
            return ApprovalKind.OUTPUT_ENABLE
        return None if policy.output_off_is_safe else ApprovalKind.STATE
    # protection, state, unknown (forbidden never gets this far)
    return ApprovalKind.STATE


def unpredictable(effect: Effect | str, value: object) -> bool:
    """A write whose effect on setpoints and outputs the gateway cannot predict: ``*RST``,
    ``*RCL``, triggers, lists, any header the profile does not know, and a protection
    command that sets no level (clearing a trip may switch an output back on)."""
    effect = Effect(effect)
    if effect in (Effect.STATE, Effect.UNKNOWN):
        return True
    return effect is Effect.PROTECTION and not isinstance(value, Decimal)


def required_for(kinds: list[ApprovalKind | None], any_unpredictable: bool
                 ) -> tuple[ApprovalKind, ...]:
    """The approvals a held write needs, in their fixed order. An unpredictable unit needs
    every kind: the setpoint and the output enable too, since it may change both."""
    wanted = set(EVERY_APPROVAL) if any_unpredictable else {k for k in kinds if k}
    return tuple(k for k in EVERY_APPROVAL if k in wanted)


def envelope_breach(unit: Unit, limits: dict[int, ChannelLimits],
                    profile: Profile | None = None) -> str | None:
    """Why ``unit`` breaks the bench's hard limits, or None.

    A unit whose channel is not known is held to the strictest limit of any channel. A
    level stored for a later trigger (a list's points, a sweep's start and stop, a
    triggered level) is judged like a setpoint: the trigger that applies it is no place to
    find out. ``profile`` says which limit bounds a field (``Profile.limit_of``: an SMU's
    voltage limit by the voltage limit); without it, the limit of the field's name.
    """
    for field, level in unit.reach:
        later = envelope_breach(dataclasses.replace(unit, field=field, value=level,
                                                    reach=()), limits, profile)
        if later:
            return f"{later} (a level {unit.header} stores for a later trigger)"
    if unit.field is None or unit.value is None or isinstance(unit.value, bool):
        return None
    key = profile.limit_of(unit.field) if profile is not None else unit.field
    if unit.channel is None:
        found = [v for c in limits.values()
                 if isinstance(v := getattr(c, key, None), Decimal)]
        limit = min(found) if found else None
    else:
        channel = limits.get(unit.channel)
        limit = getattr(channel, key, None) if channel is not None else None
    if not isinstance(limit, Decimal):
        return None
    if not isinstance(unit.value, Decimal):  # a word (MAX, AUTO): no number to judge
        return (f"{unit.header} sets {unit.field} to {unit.value}, which the bench limit of "
                f"{format_number(limit)} cannot judge: send the level as a number")
    if abs(unit.value) > limit:  # a magnitude: bipolar sources
        unit_name = {"voltage": "V", "current": "A", "ovp": "V"}.get(key, "")
        where = f"CH{unit.channel}" if unit.channel is not None else "the selected channel's"
        name = unit.field if key == unit.field else f"{unit.field} (bounded by the {key} limit)"
        return (f"{where} {name} {format_number(unit.value)} {unit_name} is above "
                f"the bench limit of {format_number(limit)} {unit_name}")
    return None


def replaces_state(unit: Unit, profile: Profile) -> bool:
    """A write that may set every channel's levels and outputs to values no snapshot read:
    a form that affects every channel (``*RCL``, ``*RST``, a stored state loaded, a
    coupling) whose effect cannot be predicted, or a header the profile does not know."""
    if not unit.writes or not unpredictable(unit.effect, unit.value):
        return False
    form = profile.form_of(unit.canonical)
    return form is None or form.channel == "all"


def decide(c: Classification, limits: dict[int, ChannelLimits], policy: PolicyConfig,
           selected_unknown: bool = False) -> Decision:
    kinds: list[ApprovalKind | None] = []
    blind = False
    profile = get_profile(c.profile)
    replaced: Unit | None = None
    stored: Unit | None = None  # a unit that saves or may rewrite a stored state
    for unit in c.units:
        if unit.effect is Effect.FORBIDDEN:
            return Decision(Verdict.REFUSE, code=-203,
                            reason=f"{unit.header} is forbidden through the gateway")
        if unit.effect is Effect.OUTPUT and unit.value is True and replaced is not None:
            # An energize is judged on the live snapshot plus the units before it; after
            # one that may replace every channel's state, that snapshot says nothing.
            return Decision(Verdict.REFUSE, code=-221, reason=(
                f"settings conflict: {unit.canonical} would switch an output on after "
                f"{replaced.canonical}, which may set every channel's levels and outputs to "
                "values no snapshot has read, so the envelope cannot be judged before it "
                "runs; send the output on in a message of its own, after it"))
        form = profile.form_of(unit.canonical) if unit.writes else None
        if form is not None and form.memory == "recall" and stored is not None:
            # A recall is judged on the record of what its slot held before this message;
            # a save or forget before it in the message may change what the slot holds.
            return Decision(Verdict.REFUSE, code=-221, reason=(
                f"settings conflict: {unit.canonical} would bring back a stored state after "
                f"{stored.canonical}, which may change what it holds, so the state it brings "
                "back cannot be judged before it runs; send the recall in a message of its "
                "own, after it"))
        if form is not None and form.memory == "recall" and replaced is not None:
            # Fields a recall does not restore keep what the unit before it left, which no
            # snapshot read: its mixes of live and stored values would be judged on a guess.
            return Decision(Verdict.REFUSE, code=-221, reason=(
                f"settings conflict: {unit.canonical} would bring back a stored state after "
                f"{replaced.canonical}, which may set every channel's levels and outputs to "
                "values no snapshot has read, so what the recall leaves cannot be judged "
                "before it runs; send the recall in a message of its own, after it"))
        if stored is None and form is not None and form.memory in ("save", "forget"):
            stored = unit
        if replaced is None and replaces_state(unit, profile):
            replaced = unit
        breach = envelope_breach(unit, limits, profile)
        if breach:
            return Decision(Verdict.REFUSE, code=-222, reason=breach)
        kinds.append(approval_for(unit, policy))
        blind = blind or (unit.writes and unpredictable(unit.effect, unit.value))
    required = required_for(kinds, blind)
    if not required:
        return Decision(Verdict.PASS)
    return Decision(Verdict.HOLD, required=required)
