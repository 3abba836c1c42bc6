"""The simulated Keithley DMM6500 multimeter: every function reads a fixed value of a
simulated DUT (volts and amps 0, 1 kΩ, 0.6 V across a diode, 1 nF, 23 °C), whichever function
``:SENS:FUNC`` (or ``:MEAS:<function>?``) selected, as the DMM6500 Reference Manual describes
:READ? and :MEASure? (the reading of the selected function).
"""

from __future__ import annotations

import re
from typing import ClassVar

from ._model import SimInstrument

__all__ = ["DMM6500_PROFILE", "DMM6500_RESOURCE", "SimDmm6500"]

DMM6500_RESOURCE = "TCPIP0::sim-dmm6500::5025::SOCKET"
DMM6500_PROFILE = "dmm6500"

#: A reading query and its buffer arguments: READ?, FETC?, MEAS?, MEAS:VOLT:AC? "defbuffer1".
_READING = re.compile(r"(READ|FETC|MEAS|MEAS:([A-Z:]+))\?(?: .*)?")
_STATISTIC = re.compile(r"TRAC:STAT:(AVER|MAX|MIN|STDD)\?(?: .*)?")


class SimDmm6500(SimInstrument):
    """Keithley DMM6500 in its SCPI command set."""

    profile = DMM6500_PROFILE
    resource_name = DMM6500_RESOURCE
    #: DMM6500 Reference Manual, :SYSTem:CLEar: "clears the event log" (the error queue).
    clears_errors: ClassVar[frozenset[str]] = frozenset({"SYST:CLE"})
    #: What the simulated DUT reads in each function (SENS:FUNC? names it).
    readings: ClassVar[dict[str, float]] = {
        "VOLT": 0.0, "VOLT:AC": 0.0, "CURR": 0.0, "CURR:AC": 0.0, "RES": 1000.0,
        "FRES": 1000.0, "DIOD": 0.6, "CAP": 1e-9, "TEMP": 23.0, "CONT": 1000.0,
        "FREQ": 0.0, "PER": 0.0}

    #: How :SENS:FUNC? names a function the gateway renders in its short form.
    answers: ClassVar[dict[str, str]] = {"VOLT": "VOLT:DC", "CURR": "CURR:DC",
                                         "FREQ": "FREQ:VOLT", "PER": "PER:VOLT"}

    def _function(self) -> str:
        return str(self._get("set_func"))

    def _value(self) -> float:
        return self.readings.get(self._function(), 0.0)

    def _model_answer(self, canonical: str) -> str | None:
        if canonical == "FUNC?":
            function = self._function()
            return f'"{self.answers.get(function, function)}"'
        if m := _READING.fullmatch(canonical):
            function = m[2]
            if function is not None:  # :MEASure:<function>? selects the function first
                if function not in self.readings:
                    return None
                self._set("set_func", function)
            return f"{self._value():+.6E}"
        if _STATISTIC.fullmatch(canonical):  # a buffer of one reading: this one
            return f"{0.0 if 'STDD' in canonical else self._value():+.6E}"
        return None
