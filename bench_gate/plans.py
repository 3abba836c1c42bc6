"""Standing plans: one scoped approval for a run's series of writes (a sweep, a ramp).

A plan names an instrument, its channels, a voltage range, a current ceiling, an optional
largest step, whether output enable is included, a number of writes and an expiry. Inside
a live plan a write runs without a click, still through the envelope, the live recheck and
the journal. Anything outside becomes an ordinary takeover request.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from .config import ChannelLimits
from .couplings import follow
from .envelope import bounded, magnitude
from .models import TakeoverRequest
from .scpi import Effect, Profile, Unit, format_number
from .states import PlanStatus

__all__ = ["DIGITS", "LARGEST", "PLACES", "Plan", "PlanScope", "PlanStatus", "covers",
           "is_plan_request", "number_problem", "outside_bench", "scope_words", "within"]

#: A plan's numbers are volts and amperes a person reads: at most this many decimal places,
#: and below ``LARGEST``. ``1e-999999999`` was a 30-byte body that the scope's words wrote
#: out as a billion digits (an 80 MB answer and a 10 MB queue page per plan at 1e-9999999).
PLACES = 12
DIGITS = 6
LARGEST = Decimal(10) ** DIGITS
_STEP = Decimal(1).scaleb(-PLACES)


class PlanScope(BaseModel):
    instrument: str
    channels: list[int] = Field(min_length=1)
    voltage: tuple[Decimal, Decimal]
    current_max: Decimal = Field(ge=0)
    max_step: Decimal | None = Field(default=None, gt=0)
    output_enable: bool = False
    max_writes: int = Field(ge=1, le=100_000)
    timeout_minutes: int = Field(default=60, ge=1, le=1440)

    @field_validator("channels")
    @classmethod
    def _distinct(cls, channels: list[int]) -> list[int]:
        twice = sorted(c for c, n in Counter(channels).items() if n > 1)
        if twice:  # the scope's words are a few short lines a person reads: each CH once
            raise ValueError(f"channel {', '.join(map(str, twice))} is named more than once")
        return channels

    @model_validator(mode="after")
    def _ordered(self) -> PlanScope:
        if self.voltage[0] > self.voltage[1]:
            raise ValueError("voltage range must be [min, max] with min <= max")
        if self.voltage[0] < 0:
            raise ValueError("voltage range cannot go below 0")
        return self

    def digest(self) -> str:
        body = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(body.encode()).hexdigest()


def number_problem(scope: PlanScope) -> tuple[str, str] | None:
    """(field, why) for the first number of ``scope`` that is not a plain bench number
    (``PLACES`` decimal places at most, below ``LARGEST``), or None. Checked when a plan is
    asked for, at every door, before anything writes the number out."""
    numbers = [("voltage", scope.voltage[0]), ("voltage", scope.voltage[1]),
               ("current_max", scope.current_max), ("max_step", scope.max_step)]
    for name, value in numbers:
        if value is None:
            continue
        try:  # adjusted() is the exponent of the leading digit: no arithmetic on 1E+999999999
            plain = value.is_finite() and (value.is_zero() or value.adjusted() < DIGITS) \
                and value.quantize(_STEP) == value
        except ArithmeticError:  # more digits than a context holds: not plain either
            plain = False
        if not plain:
            shown = str(value) if len(str(value)) <= 40 else str(value)[:40] + "..."
            return name, (f"{name} {shown} is not a bench number: at most {PLACES} decimal "
                          f"places, below {LARGEST}")
    return None


def outside_bench(scope: PlanScope, profile: Profile, limits: dict[int, ChannelLimits]
                  ) -> tuple[str, str] | None:
    """(field, why) for the first part of ``scope`` this bench does not allow: a channel
    it lacks, one with no voltage or current setpoint, a range above the envelope (or the
    instrument's range where the envelope says nothing); else None."""
    for ch in scope.channels:
        if ch not in profile.channels:
            return "channels", f"{scope.instrument} has no channel {ch}"
        lacks = [f for f in ("voltage", "current") if not profile.has_field(f, ch)]
        if lacks:  # a fixed output (the SPD3303X's CH3): the scope's range bounds nothing
            return "channels", (f"{scope.instrument} CH{ch} has no {' or '.join(lacks)} "
                                "setpoint, so a plan's range cannot bound it")
        bounds = limits.get(ch)
        hard_v = profile.range_of("voltage", ch)
        hard_i = profile.range_of("current", ch)
        vmax = bounds.voltage if bounds is not None and bounds.voltage is not None else (
            hard_v[1] if hard_v else None)
        imax = bounds.current if bounds is not None and bounds.current is not None else (
            hard_i[1] if hard_i else None)
        farthest = max(scope.voltage, key=abs)  # a limit bounds the magnitude
        if vmax is not None and abs(farthest) > vmax:
            return "voltage", (f"CH{ch} voltage up to {farthest} V is above the bench "
                               f"limit of {vmax} V")
        if imax is not None and scope.current_max > imax:
            return "current_max", (f"CH{ch} current {scope.current_max} A is above the "
                                   f"bench limit of {imax} A")
    return None


class Plan(BaseModel):
    id: str
    run_id: str
    request_id: str
    scope: PlanScope
    scope_hash: str
    status: PlanStatus = PlanStatus.PENDING
    writes_used: int = 0
    created_at: datetime
    expires_at: datetime | None = None
    approved_by: list[str] = Field(default_factory=list)
    #: The tokens its approvals were given with: it ends when one of them is revoked.
    tokens: list[str] = Field(default_factory=list)
    revoked_by: str | None = None
    #: Its end, kept with it until done (its ``plan_revoked`` event, a stop's suspension of
    #: its run): a crash or a store failure midway is finished by the restart or a sweep.
    unfinished: dict[str, Any] | None = None
    #: The bench whose instrument the plan was approved for: instrument names are per
    #: bench, so another bench's ``psu`` is another instrument (and another DUT).
    bench: str = ""

    @property
    def writes_left(self) -> int:
        return max(0, self.scope.max_writes - self.writes_used)


def is_plan_request(req: TakeoverRequest) -> bool:
    """A takeover request whose proposal is a plan's scope (not a write)."""
    return req.plan_id is not None and all(a.effect == "plan" for a in req.actions)


def scope_words(scope: PlanScope) -> list[str]:
    """The scope in words, one line per rule, as the console and CLI show it."""
    chs = ", ".join(f"CH{c}" for c in scope.channels)
    lo, hi = (format_number(v) for v in scope.voltage)
    lines = [
        f"{scope.instrument} {chs}: voltage setpoints from {lo} V to {hi} V",
        f"current limit at most {format_number(scope.current_max)} A",
    ]
    if scope.max_step is not None:
        lines.append(f"each voltage step at most {format_number(scope.max_step)} V")
    lines.append("output enable included: outputs may be switched on while the setpoint is "
                 "in range" if scope.output_enable else "output enable NOT included")
    lines.append(f"at most {scope.max_writes} writes, for {scope.timeout_minutes} minutes")
    return lines


def _energized(profile: Profile, ch: int, state: dict[str, str]) -> bool:
    """CH``ch`` is on in ``state``, or its output is not known (then it may be)."""
    name = profile.safe_action.field if profile.safe_action is not None else "output"
    return state.get(f"ch{ch}.{name}", "1") not in ("0", "OFF", "False", "false")


def within(scope: PlanScope, profile: Profile, ch: int, name: str, value: str | None) -> bool:
    """A channel's field at ``value`` lies inside the plan's scope (the scope as an envelope
    inside the envelope, as at an output enable). A field no limit bounds is not judged."""
    if not profile.has_field(name, ch):
        return True
    limit = bounded(profile, ChannelLimits(voltage=scope.voltage[1],
                                           current=scope.current_max)).get(name)
    if limit is None:
        return True
    return _outside_at_enable(scope, profile, ch, {f"ch{ch}.{name}": value}
                              if value is not None else {}, only=name) is None


def _outside_at_enable(scope: PlanScope, profile: Profile, ch: int,
                       state: dict[str, str], doing: str = "output enable",
                       only: str | None = None) -> str | None:
    """Why CH``ch`` switched on (or left on, ``doing``) leaves the plan, or None. The scope
    is an envelope inside the envelope, judged like it (``envelope.bounded``): every field
    the voltage or the current bounds, under whatever name (an SMU's current source level
    and voltage limit, whatever its function), and a field the live state does not show is
    outside."""
    lo, hi = scope.voltage
    limits = ChannelLimits(voltage=hi, current=scope.current_max)
    for name, limit in bounded(profile, limits).items():
        if not profile.has_field(name, ch) or only not in (None, name):
            continue
        spec = profile.fields[name]
        try:  # a list's points by the farthest one (FieldSpec.points)
            raw = state[f"ch{ch}.{name}"]
            value = Decimal(raw) if not spec.points else magnitude(raw)
            if value is None:
                raise ArithmeticError(raw)
        except (KeyError, ArithmeticError):
            return f"CH{ch} {doing} with its {spec.label} unknown is outside the plan"
        low = lo if name == "voltage" else Decimal(0)
        if not value.is_finite() or not low <= abs(value) <= limit or (
                name == "voltage" and value < lo):
            return (f"CH{ch} {doing} with its {spec.label} at {format_number(value)} "
                    f"{spec.unit} is outside the plan")
    return None


def covers(plan: Plan, instrument: str, units: tuple[Unit, ...],
           live: dict[str, str], profile: Profile) -> str | None:
    """None if every write unit lies inside the plan, else why not (one sentence).

    ``live`` holds the channel state just read (``ch1.voltage``...); units apply in order,
    so ``VOLT 3,(@1);:OUTP ON,(@1)`` is judged with the new setpoint. An output enable is
    judged on every field a bench limit bounds (``Profile.limit_of``), not its names only.
    """
    scope = plan.scope
    if instrument != scope.instrument:
        return f"the plan covers {scope.instrument}, not {instrument}"
    state = dict(live)
    for unit in units:
        if unit.effect in (Effect.READ, Effect.SELECT, Effect.HARMLESS, Effect.MEASURE_CONFIG):
            continue
        ch = unit.channel
        if ch is None or ch not in scope.channels:
            return f"CH{ch} is not in the plan" if ch is not None else \
                f"{unit.canonical} is not a channel write the plan covers"
        value = unit.value
        if unit.effect is Effect.SETPOINT and isinstance(value, Decimal):
            if unit.field == "voltage":
                lo, hi = scope.voltage
                if not lo <= value <= hi:
                    return (f"CH{ch} voltage {format_number(value)} V is outside the plan's "
                            f"{format_number(lo)} to {format_number(hi)} V")
                before = state.get(f"ch{ch}.voltage")
                if scope.max_step is not None and before is not None and \
                        abs(value - Decimal(before)) > scope.max_step:
                    return (f"CH{ch} step {before} V → {format_number(value)} V is larger than "
                            f"the plan's {format_number(scope.max_step)} V")
            elif unit.field == "current":
                if value > scope.current_max:
                    return (f"CH{ch} current limit {format_number(value)} A is above the "
                            f"plan's {format_number(scope.current_max)} A")
            else:
                return f"{unit.canonical} is not covered by the plan"
            state[key := f"ch{ch}.{unit.field}"] = format_number(value)
            followed = follow(profile, state, key)  # a coupling moves other channels with it
            moved = sorted(k for k, v in followed.items() if state.get(k) != v)
            if moved:
                return (f"{', '.join(moved)} would follow CH{ch} (a coupling is on): the "
                        "plan covers only what it names")
            if _energized(profile, ch, state):
                # The plan is a rule about the state it leaves, like the envelope: a setpoint
                # on a channel that is on (switched on under another approval, say at 1 A)
                # runs the DUT at every field of that state, not only the one it sets.
                outside = _outside_at_enable(scope, profile, ch, state, "left on")
                if outside is not None:
                    return outside
            continue
        if unit.effect is Effect.OUTPUT:
            if value is True:
                if not scope.output_enable:
                    return "the plan does not include output enable"
                outside = _outside_at_enable(scope, profile, ch, state)
                if outside is not None:
                    return outside
            state[f"ch{ch}.{unit.field or 'output'}"] = "1" if value is True else "0"
            continue
        return f"{unit.canonical} ({unit.effect.value}) is not covered by a plan"
    return None
