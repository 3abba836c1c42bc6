"""The simulated Keysight 34465A of the default bench (:class:`SimDmm`): its measurement
functions, CONFigure/MEASure?/READ?, how long a reading takes, and the probe that wires it
to the supply.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from pyvisa.resources import MessageBasedResource

from bench_gate.scpi import lex
from bench_gate.scpi._lexer import CharData, Number

from ._model import SimInstrument
from ._resources import DMM_PROFILE, DMM_RESOURCE
from ._settings import resolve_keywords

__all__ = ["Probe", "SimDmm"]

#: A reading source for the DMM: (volts, amps).
Probe = Callable[[], tuple[float, float]]


@dataclass(frozen=True)
class _Function:
    """One measurement function of the meter, as CONF? names it, and its settings."""

    name: str  # as CONF? and FUNC? name it: VOLT, VOLT:AC, RES...
    range: str | None  # the setting that holds its range (VOLT:RANG)
    resolution: str | None  # the setting that holds its resolution (VOLT:RES)
    unit: str  # as DATA:LAST? labels a reading
    reading: float | None  # what the simulated DUT reads (None: the probe's)


class SimDmm(SimInstrument):
    """Keysight 34465A. With a probe, voltage and current readings come from it (the bench
    wires PSU CH1); other functions read fixed values of a simulated DUT."""

    profile = DMM_PROFILE
    resource_name = DMM_RESOURCE
    lockable = True
    functions: ClassVar[dict[str, _Function]] = {f.name: f for f in (
        _Function("VOLT", "VOLT:RANG", "VOLT:RES", "VDC", None),
        _Function("VOLT:AC", "VOLT:AC:RANG", None, "VAC", 0.0),
        _Function("VOLT:RAT", "VOLT:RANG", "VOLT:RES", "", 1.0),
        _Function("CURR", "CURR:RANG", "CURR:RES", "ADC", None),
        _Function("CURR:AC", "CURR:AC:RANG", None, "AAC", 0.0),
        _Function("RES", "RES:RANG", "RES:RES", "OHM", 1000.0),
        _Function("FRES", "FRES:RANG", "FRES:RES", "OHM", 1000.0),
        _Function("FREQ", None, None, "HZ", 0.0),
        _Function("PER", None, None, "SEC", 0.0),
        _Function("CAP", "CAP:RANG", None, "F", 1e-9),
        _Function("CONT", None, None, "OHM", 1000.0),
        _Function("DIOD", None, None, "VDC", 0.6),
        _Function("TEMP", None, None, "C", 23.0),
    )}
    #: CONFigure and MEASure? headers (canonical) and the function each selects.
    configures: ClassVar[dict[str, str]] = {
        "VOLT:DC": "VOLT", "VOLT:AC": "VOLT:AC", "VOLT:DC:RAT": "VOLT:RAT", "CURR:DC": "CURR",
        "CURR:AC": "CURR:AC", "RES": "RES", "FRES": "FRES", "FREQ": "FREQ", "PER": "PER",
        "CAP": "CAP", "CONT": "CONT", "DIOD": "DIOD", "TEMP": "TEMP"}
    #: Queries that answer the last reading.
    readings: ClassVar[frozenset[str]] = frozenset({"FETC?", "DATA:LAST?", "R?", "DATA:REM?"})

    def __init__(
        self,
        resource: MessageBasedResource,
        definition: Mapping[str, Any],
        probe: Probe | None = None,
    ) -> None:
        super().__init__(resource, definition)
        self._probe = probe

    def connect(self, probe: Probe | None) -> None:
        """Take readings from ``probe`` (None: keep whatever the SIM: setters last stored)."""
        with self._lock:
            self._probe = probe

    def _function(self) -> _Function:
        name = str(self._get("set_func"))
        return self.functions.get(name, self.functions["VOLT"])

    def _model_write(self, canonical: str) -> bool:
        head = canonical.split(" ", 1)[0]
        if head.startswith("CONF:") and head[5:] in self.configures:
            self._configure(self.configures[head[5:]], canonical)
            return True
        return False

    def _model_answer(self, canonical: str) -> str | None:
        head = canonical.split(" ", 1)[0]
        if head.startswith("MEAS:") and head[5:-1] in self.configures:
            # MEASure? is CONFigure then READ? (34465A manual, MEASure subsystem).
            self._configure(self.configures[head[5:-1]], canonical)
            return self._read(fresh=True)
        if head == "READ?":
            return self._read(fresh=True)
        if head in self.readings:
            return self._read(fresh=False, labelled=head == "DATA:LAST?")
        if head == "CONF?":
            return self._conf()
        return None

    def _configure(self, name: str, canonical: str) -> None:
        """Select a function with its range and resolution, as CONFigure does."""
        self._set("set_func", name)
        function = self.functions[name]
        params = lex(canonical)[0].params if " " in canonical else ()
        if function.range is not None:
            auto = self._prop_for(function.range + ":AUTO")
            wanted = params[0] if params else None
            if isinstance(wanted, Number):
                self._send(f"{function.range} {wanted.value:f}")
                if auto is not None:
                    self._set(auto, 0)
            elif isinstance(wanted, CharData) and wanted.text in ("MIN", "MAX"):
                self._send(resolve_keywords(self._profile, f"{function.range} {wanted.text}"))
                if auto is not None:
                    self._set(auto, 0)
            elif auto is not None:  # AUTO, DEF or nothing: autorange
                self._set(auto, 1)
        if function.resolution is not None and len(params) > 1:
            wanted = params[1]
            if isinstance(wanted, Number):
                self._send(f"{function.resolution} {wanted.value:f}")

    def _prop_for(self, header: str) -> str | None:
        query = header + "?"
        return next((p.name for p in self._props.values() if p.getter == query), None)

    def _conf(self) -> str:
        """``"VOLT +1.00000000E+01,+3.00000000E-06"``: the function, range and resolution."""
        function = self._function()
        name = function.name if function.name != "VOLT:RAT" else "VOLT:RAT"
        if function.range is None:
            return f'"{name}"'
        rng = float(self._ask(function.range + "?"))
        res = float(self._ask(function.resolution + "?")) if function.resolution else 0.0
        return f'"{name} {rng:+.8E},{res:+.8E}"'

    def _read(self, *, fresh: bool, labelled: bool = False) -> str:
        if fresh:
            self._refresh()
            self.busy += self._reading_seconds()
        value = f"{float(self._get('reading')):+.8E}"
        return f"{value} {self._function().unit}" if labelled else value

    def _reading_seconds(self) -> float:
        """How long READ? takes on the real meter (34465A guide, NPLC, APERture, ZERO:AUTO,
        SAMPle:COUNt, TRIGger:COUNt/DELay): each trigger waits its delay then takes its
        samples, each integrating NPLC line cycles (or the aperture), twice with autozero."""
        prefix = self._function().name.split(":")[0]

        def number(query: str, default: float) -> float:
            return float(self._ask(query)) if query in self._answerable else default

        per_sample = number(f"{prefix}:NPLC?", 0.0) / number("SYST:LFR?", 50.0)
        if number(f"{prefix}:APER:ENAB?", 0.0):
            per_sample = number(f"{prefix}:APER?", per_sample)
        per_sample *= 2 if number(f"{prefix}:ZERO:AUTO?", 0.0) else 1
        triggers = number("TRIG:COUN?", 1.0)
        triggers = triggers if triggers < 1e30 else 1.0  # INFinity: each READ? takes one
        seconds = triggers * (number("TRIG:DEL?", 0.0) + number("SAMP:COUN?", 1.0) * per_sample)
        return min(seconds, 86400.0)

    def _refresh(self) -> None:
        function = self._function()
        if self._probe is not None:
            volts, amps = self._probe()
            self._set("measured_voltage", volts)
            self._set("measured_current", amps)
        if function.reading is not None:
            value = function.reading
        elif function.name == "CURR":
            value = float(self._get("measured_current"))
        else:
            value = float(self._get("measured_voltage"))
        self._set("reading", value)
