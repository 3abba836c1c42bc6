"""The simulated Keithley 2450 SourceMeter: one channel driving a resistive DUT.

pyvisa-sim (``k2450.yaml``) holds every setting; this model makes the readings follow them,
as the 2450 Reference Manual describes the source and its limits (section 6, SOURce):
sourcing voltage, the current is V/R unless the current limit (ILIM) clamps it; sourcing
current, the voltage is I*R unless the voltage limit (VLIM) clamps it. With the output off
nothing flows. Changing the source function switches the output off, as the 2450 does.

Remote sense (section 6, ``[:SENSe[1]]:<function>:RSENse``): with 4-wire sensing on, the
voltage source raises its force voltage until the voltage at the SENSE terminals is the
programmed amplitude. The simulated bench wires only the FORCE leads (``SIM:SENSE 0``), so
the source sees nothing there and drives the DUT to the top of its source range (5 % over
range), as far as the current limit lets it (Keithley's SMU manuals: an open sense lead lets
the output go "radically different than the programmed voltage level").

The output-off state (section 2, "Output-off state"; section 6, :OUTPut[1]:<function>:SMODe)
is kept per source function, NORMal after *RST: with the output off, HIMPedance opens the
output relay; NORMal and ZERO keep a 0 V voltage source on the terminals (ZERO with the
current limit still in force), GUARd a 0 A current source. ``off_state()`` says which holds
now. *SAV stores and *RCL recalls the source set-up with the output and its off states
(section 6, *RCL: "Recall settings" affects :OUTPut[1][:STATe] and the SMODe).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from pyvisa.resources import MessageBasedResource

from ._model import SimInstrument

__all__ = ["SMU_PROFILE", "SMU_RESOURCE", "SimSmu"]

SMU_RESOURCE = "TCPIP0::sim-smu::5025::SOCKET"
SMU_PROFILE = "k2450"

#: A reading query and its buffer arguments: READ?, FETC?, MEAS?, MEAS:VOLT? "defbuffer1".
_READING = re.compile(r"(READ|FETC|MEAS|MEAS:VOLT|MEAS:CURR|MEAS:RES)\?(?: .*)?")
_STATISTIC = re.compile(r"TRAC:STAT:(AVER|MAX|MIN|STDD)\?(?: .*)?")
_SAV = re.compile(r"\*SAV (\d)")
_RCL = re.compile(r"\*RCL (\d)")
_FUNCTIONS = {"MEAS:VOLT": "VOLT", "MEAS:CURR": "CURR", "MEAS:RES": "RES"}
#: How the 2450 names its measure functions in answers (QCoDeS' Keithley2450 maps these).
_SENSE_NAMES = {"VOLT": "VOLT:DC", "CURR": "CURR:DC"}
#: The 2450's voltage source ranges (section 6, :SOURce[1]:VOLTage:RANGe), and its overrange.
_RANGES = (0.02, 0.2, 2.0, 20.0, 200.0)
_OVERRANGE = 1.05
#: An answer of numbers only (a level, a reading, a list of them), as :FORMat:ASCii:PRECision
#: writes it: section 6 "sets the precision (number of digits) for all numbers returned in
#: the ASCII format"; integers (OUTP? 1) and words are left as they are.
_DECIMALS = re.compile(r"[-+]?\d+\.\d*(?:E[-+]?\d+)?(?:,[-+]?\d+\.\d*(?:E[-+]?\d+)?)*")


def _reading(value: float) -> str:
    return f"{value:+.6E}"


class SimSmu(SimInstrument):
    """Keithley 2450 in its SCPI command set; ``SIM:LOAD`` is the DUT's resistance."""

    profile = SMU_PROFILE
    resource_name = SMU_RESOURCE
    rst_keeps: ClassVar[frozenset[str]] = frozenset(
        {"ese", "sre", "saved_slot", "recalled_slot", "load", "sense_leads"})
    #: 2450 Reference Manual, :SYSTem:CLEar: "clears the event log" (the error queue).
    clears_errors: ClassVar[frozenset[str]] = frozenset({"SYST:CLE"})
    #: What *SAV stores and *RCL recalls: the source set-up, the output and its off states.
    saved: ClassVar[tuple[str, ...]] = (
        "set_sour1_func_ch1", "voltage", "ilim", "current_level", "vlim",
        "set_outp1_volt_smod_ch1", "set_outp1_curr_smod_ch1", "output")

    def __init__(self, resource: MessageBasedResource, definition: Mapping[str, Any]) -> None:
        super().__init__(resource, definition)
        self._slots: dict[int, dict[str, int | float | str]] = {}

    def off_state(self) -> str:
        """What the terminals hold now: ``on``, or the output-off state in force (that of
        the source function): ``HIMP`` (the relay open), ``NORM``, ``ZERO``, ``GUAR``."""
        with self._lock:
            if int(self._get("output")):
                return "on"
            function = "curr" if str(self._get("set_sour1_func_ch1")) == "CURR" else "volt"
            return str(self._get(f"set_outp1_{function}_smod_ch1"))

    def terminals(self) -> tuple[float, float]:
        """(volts, amps) at the terminals now: what the DUT sees."""
        with self._lock:
            return self._terminals()

    def _terminals(self) -> tuple[float, float]:
        if not int(self._get("output")):
            return 0.0, 0.0
        load = float(self._get("load"))
        if str(self._get("set_sour1_func_ch1")) == "CURR":
            vlim = float(self._get("vlim"))
            volts = max(-vlim, min(vlim, float(self._get("current_level")) * load))
            return volts, volts / load
        ilim = float(self._get("ilim"))
        volts = float(self._get("voltage"))
        if self._open_sense():
            volts = self._range_top(volts)
        amps = max(-ilim, min(ilim, volts / load))
        return amps * load, amps

    def _open_sense(self) -> bool:
        """4-wire sensing on for the measure function, and no sense leads on the DUT."""
        function = {"VOLT": "volt", "CURR": "curr", "RES": "res"}.get(self._sense(), "volt")
        return bool(int(self._get(f"set_sens_{function}_rsen"))) and \
            not int(self._get("sense_leads"))

    def _range_top(self, volts: float) -> float:
        """Where the source goes when it senses nothing: its range's top, with the sign."""
        if int(self._get("set_sour1_volt_rang_auto_ch1")):
            top = next((r for r in _RANGES if abs(volts) <= r), _RANGES[-1])
        else:
            top = float(self._get("set_sour1_volt_rang_ch1"))
        return (top if volts >= 0 else -top) * _OVERRANGE

    def _sense(self) -> str:
        return str(self._get("set_sens_func"))

    def _value(self) -> float:
        volts, amps = self._terminals()
        function = self._sense()
        if function == "CURR":
            return amps
        if function == "RES":
            return float(self._get("load"))
        return volts

    def _answer(self, canonical: str) -> str | None:
        answer = super()._answer(canonical)
        digits = int(self._get("set_form_asc_prec"))
        if not digits or answer is None or not _DECIMALS.fullmatch(answer.strip()):
            return answer
        return ",".join(f"{float(v):+.{digits - 1}E}" for v in answer.strip().split(","))

    def _model_answer(self, canonical: str) -> str | None:
        if canonical == "SENS:FUNC?":  # section 6: "VOLT:DC", "CURR:DC" or "RES", quoted
            return f'"{_SENSE_NAMES.get(self._sense(), self._sense())}"'
        if canonical.startswith("TRAC:POIN? "):  # a buffer named: one buffer is kept
            return self._ask("TRAC:POIN?")
        if m := _READING.fullmatch(canonical):
            function = _FUNCTIONS.get(m[1])
            if function is not None:  # :MEASure:<function>? selects the function first
                self._set("set_sens_func", function)
            return _reading(self._value())
        if _STATISTIC.fullmatch(canonical):  # a buffer of one reading: this one
            return _reading(0.0 if "STDD" in canonical else self._value())
        return None

    def _link(self, canonical: str) -> None:
        if canonical.startswith("SOUR1:FUNC "):
            self._set("output", 0)  # the 2450 switches the output off with the function
        elif m := _SAV.fullmatch(canonical):
            self._slots[int(m[1])] = {name: self._get(name) for name in self.saved}
        elif m := _RCL.fullmatch(canonical):
            slot = self._slots.get(int(m[1]))
            if slot is not None:  # output last: the 2450 recalls the set-up it applies
                for name in self.saved:
                    self._set(name, slot[name])
