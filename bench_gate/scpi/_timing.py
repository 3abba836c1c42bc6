"""How long a reading may take, from what the instrument was told (issue 18: a ``READ?`` at
NPLC 100 takes about 4 s on a 34465A, and a fixed 2 s timeout failed it every time).

A profile marks the settings that decide a reading's duration (``timing:`` on the form:
NPLC, aperture, sample and trigger counts, trigger delay, sample interval) and the queries
that take a reading (``reads: true``), and may give a header a time of its own
(``slow:``). :class:`Timing` keeps the values the gateway saw set, per instrument, starting
from the profile's defaults; :meth:`Timing.seconds` says how long one unit may take.

    >>> from bench_gate.scpi import classify, get_profile
    >>> from bench_gate.scpi._timing import Timing
    >>> meter = get_profile("34465a")
    >>> timing = Timing(meter)
    >>> timing.note(classify("VOLT:NPLC 100", "34465a").units[0])
    >>> round(timing.seconds(classify("READ?", "34465a").units[0]), 1)
    4.0
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from ._profile import Profile
from ._schema import FormSpec, TimingRole
from ._units import Unit

__all__ = ["Timing"]

#: The power line frequency a PLC is counted in when the instrument's is not known.
LINE_HZ = Decimal(50)
#: What a reading costs beyond its integration: autozero doubles it on a DMM.
AUTOZERO = Decimal(2)
#: What a unit the profile says nothing about may take: the link's own timeout.
NOTHING = 0.0


class Timing:
    """The timing settings one instrument was told, as far as the gateway saw."""

    def __init__(self, profile: Profile, line_hz: Decimal = LINE_HZ) -> None:
        self.profile = profile
        self.line_hz = line_hz
        self.values: dict[TimingRole, Decimal] = {}
        for command in profile.model.commands:
            form = command.set
            if form is None or form.timing is None:
                continue
            default = next((p.default for p in form.params if p.default is not None), None)
            # The sample timer paces readings only once a client turns it on (SAMP:SOUR TIM).
            if default is not None and form.timing != "sample_interval":
                self._keep(form.timing, default)

    def _keep(self, role: TimingRole, value: Decimal) -> None:
        # Several headers share a role (VOLT:NPLC, CURR:NPLC...): the longest one counts,
        # so a timeout is never too short for whichever function is selected.
        if role in ("nplc", "aperture", "trigger_delay", "sample_interval"):
            self.values[role] = max(self.values.get(role, value), value)
        else:
            self.values[role] = value

    def _form(self, unit: Unit) -> FormSpec | None:
        return self.profile.form_of(unit.canonical)

    def note(self, unit: Unit) -> None:
        """A unit that ran: keep its value if it sets a timing setting."""
        form = self._form(unit)
        if form is None or form.timing is None or unit.query:
            return
        text = unit.canonical.split(" ", 1)[1].split(",")[0] if " " in unit.canonical else ""
        if text.upper().startswith("INF"):
            value = Decimal(1)  # an endless trigger count: each READ? still takes one
        elif text.upper() in ("MIN", "MAX", "DEF"):
            spec = form.params[0] if form.params else None
            if spec is None:
                return
            value = (spec.default if text.upper() == "DEF" else spec.range[0 if text.upper()
                     == "MIN" else 1] if spec.range else None) or Decimal(0)
        else:
            try:
                value = Decimal(text)
            except InvalidOperation:
                return
        self._keep(form.timing, value)

    def reading(self) -> float:
        """Seconds one reading sequence takes at the settings kept."""
        v = self.values
        per_sample = max(v.get("nplc", Decimal(0)) / self.line_hz * AUTOZERO,
                         v.get("aperture", Decimal(0)) * AUTOZERO,
                         v.get("sample_interval", Decimal(0)))
        samples = max(v.get("samples", Decimal(1)), Decimal(1))
        triggers = max(v.get("triggers", Decimal(1)), Decimal(1))
        return float(triggers * (v.get("trigger_delay", Decimal(0)) + samples * per_sample))

    def seconds(self, unit: Unit) -> float:
        """How long ``unit`` may take beyond the link's own timeout: 0 for most."""
        form = self._form(unit)
        if form is None:
            return NOTHING
        extra = float(form.slow) if form.slow is not None else NOTHING
        if form.reads:
            extra += self.reading()
        return extra
