"""How long a reading may take, from what the instrument was told (issue 18: a ``READ?`` at
NPLC 100 takes about 4 s on a 34465A, and a fixed 2 s timeout failed it every time).

A profile marks the settings that decide a reading's duration (``timing:`` on the form:
NPLC, aperture, sample and trigger counts, trigger delay, sample interval) and the queries
that take a reading (``reads: true``), and may give a header a time of its own
(``slow:``). :class:`Timing` keeps the values the gateway saw set, per instrument, starting
from the profile's defaults; :meth:`Timing.seconds` says how long one unit may take beyond
the link's own timeout, never more than the instrument's cap for a reading;
:meth:`Timing.refusal` names a configuration whose reading would take longer than the cap
whichever function is selected.

    >>> from bench_gate.scpi import classify, get_profile
    >>> from bench_gate.scpi._timing import Timing
    >>> meter = get_profile("34465a")
    >>> timing = Timing(meter)
    >>> timing.note(classify("VOLT:NPLC 100", "34465a").units[0])
    >>> round(timing.seconds(classify("READ?", "34465a").units[0]), 1)
    4.0
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation

from ._profile import Profile
from ._schema import Effect, FormSpec, TimingRole
from .units import Unit

__all__ = ["CAP", "Timing"]

#: The power line frequency a PLC is counted in when the instrument's is not known.
LINE_HZ = Decimal(50)
#: What a reading costs beyond its integration: autozero doubles it on a DMM.
AUTOZERO = Decimal(2)
#: What a unit the profile says nothing about may take: the link's own timeout.
NOTHING = 0.0
#: The longest a reading may hold its lane, in seconds, unless the bench says otherwise
#: (``max_reading_s``): the lane serializes every client, and an emergency stop on this
#: instrument waits for the command running on it.
CAP = 60.0
#: IEEE 488.2 §10.32: ``*RST`` puts the device in its known reset state (the profile's
#: defaults); any other state-changing command (``*RCL``, a preset) leaves it unknown.
RESET = "*RST"
#: Roles that several headers share (VOLT:NPLC, CURR:NPLC...): which one applies depends on
#: the function selected, which the gateway does not track.
_PER_FUNCTION = ("nplc", "aperture")


def _canonical(unit: Unit | str) -> str:
    return unit if isinstance(unit, str) else unit.canonical


class Timing:
    """The timing settings one instrument was told, as far as the gateway saw."""

    def __init__(self, profile: Profile, line_hz: Decimal = LINE_HZ,
                 cap: float = CAP) -> None:
        self.profile = profile
        self.line_hz = line_hz
        self.cap = cap
        #: After ``*RCL``, an unknown header or a reconnect: a reading may take up to the cap.
        self.unknown = False
        # Keyed by the form object (id): each header keeps its own value.
        self._defaults: dict[int, tuple[TimingRole, Decimal]] = {}
        for command in profile.model.commands:
            form = command.set
            if form is None or form.timing is None:
                continue
            default = next((p.default for p in form.params if p.default is not None), None)
            # The sample timer paces readings only once a client turns it on (SAMP:SOUR TIM).
            if default is not None and form.timing != "sample_interval":
                self._defaults[id(form)] = (form.timing, default)
        self.values: dict[int, tuple[TimingRole, Decimal]] = dict(self._defaults)

    def reset(self, *, known: bool = True) -> None:
        """Back to the profile's defaults; ``known=False``: the instrument's real settings
        are not known (a recall, a reconnect), so a reading may take up to the cap."""
        self.values = dict(self._defaults)
        self.unknown = not known

    def _form(self, canonical: str) -> FormSpec | None:
        return self.profile.form_of(canonical)

    def note(self, unit: Unit | str) -> None:
        """A unit that ran (a canonical unit, or its text): keep what it set."""
        canonical = _canonical(unit)
        if canonical.split(" ", 1)[0].endswith("?"):
            return
        form = self._form(canonical)
        if canonical == RESET:
            self.reset()
        elif form is None or form.effect in (Effect.STATE, Effect.UNKNOWN):
            self.reset(known=False)
        elif form.timing is not None:
            value = self._value(form, canonical)
            if value is not None:
                self.values[id(form)] = (form.timing, value)

    @staticmethod
    def _value(form: FormSpec, canonical: str) -> Decimal | None:
        text = canonical.split(" ", 1)[1].split(",")[0].upper() if " " in canonical else ""
        if text.startswith("INF"):
            return Decimal(1)  # an endless trigger count: each READ? still takes one
        if text in ("MIN", "MAX", "DEF"):
            spec = form.params[0] if form.params else None
            if spec is None:
                return None
            if text == "DEF":
                return spec.default
            return spec.range[0 if text == "MIN" else 1] if spec.range else None
        try:
            return Decimal(text)
        except InvalidOperation:
            return None

    def _of(self, role: TimingRole) -> list[Decimal]:
        return [value for r, value in self.values.values() if r == role]

    def reading(self, *, least: bool = False) -> float:
        """Seconds one reading sequence takes at the settings kept: the longest it may take
        (the slowest function's integration, autozero on), or with ``least`` the shortest
        (the fastest function's, autozero off, no sample timer)."""
        pick = min if least else max

        def one(role: TimingRole, empty: Decimal) -> Decimal:
            values = self._of(role)
            return pick(values) if values else empty

        nplc, aperture = self._of("nplc"), self._of("aperture")
        integrations = [pick(nplc) / self.line_hz] if nplc else []
        integrations += [pick(aperture)] if aperture else []
        if least:
            per_sample = min(integrations, default=Decimal(0))
        else:
            per_sample = max([i * AUTOZERO for i in integrations]
                             + [one("sample_interval", Decimal(0))])
        samples = max(one("samples", Decimal(1)), Decimal(1))
        triggers = max(one("triggers", Decimal(1)), Decimal(1))
        return float(triggers * (one("trigger_delay", Decimal(0)) + samples * per_sample))

    def seconds(self, unit: Unit | str) -> float:
        """How long ``unit`` may take beyond the link's own timeout: 0 for most; for a
        reading what the settings kept say, never more than the cap (the cap itself when
        the settings are not known)."""
        form = self._form(_canonical(unit))
        if form is None:
            return NOTHING
        extra = float(form.slow) if form.slow is not None else NOTHING
        if form.reads:
            extra += self.cap if self.unknown else min(self.reading(), self.cap)
        return extra

    def refusal(self, units: Iterable[Unit]) -> str | None:
        """Why running ``units`` would configure a reading longer than the cap whichever
        function is selected (checked at each reading and at the end), or None."""
        units = list(units)
        if not any(self._timed(u) for u in units):
            return None
        trial = copy.copy(self)
        trial.values = dict(self.values)
        for unit in units:
            trial.note(unit)
            form = self._form(unit.canonical)
            if form is not None and form.reads and unit.query:
                why = trial._too_long(unit.canonical)
                if why:
                    return why
        return trial._too_long("these settings")

    def _timed(self, unit: Unit) -> bool:
        form = self._form(unit.canonical)
        return form is not None and (form.timing is not None or (form.reads and unit.query))

    def _too_long(self, what: str) -> str | None:
        least = self.reading(least=True)
        if least <= self.cap:
            return None
        return (f"{what}: a reading would take at least {least:.6g} s at the settings the "
                f"gateway knows (integration, sample and trigger counts, trigger delay), over "
                f"this instrument's {self.cap:g} s limit for one reading (max_reading_s); "
                f"shorten the integration time before raising the counts")
