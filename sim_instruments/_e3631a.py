"""The simulated Keysight E3631A triple-output supply, as its User's Guide (chapter 4,
"Remote interface reference") describes it: no channel lists; ``INSTrument:SELect`` /
``INSTrument:NSELect`` choose an output, and ``VOLTage``, ``CURRent`` and ``MEASure`` act on
the selected one; ``OUTPut`` switches all three at once; ``APPLy`` names its output.

The model keeps its own selected output (``INST:NSEL?``), shared by every interface like the
instrument's, and classifies each message under it; a message with a channel list is
refused as the E3631A refuses it. Each output drives a resistive DUT (``SIM:LOAD<n>``):
while the outputs are on it regulates to its voltage unless the DUT would draw more than
its current limit.

Triggering (chapter 4, "Triggering"): ``VOLTage:TRIGgered`` and ``CURRent:TRIGgered`` store
pending levels of the selected output (unset, their queries answer the immediate level);
``INITiate`` arms the trigger, which fires at once with ``TRIGger:SOURce IMMediate`` or on
``*TRG`` with ``BUS``; after ``TRIGger:DELay`` the selected output, and every output
``INSTrument:COUPle`` joins to it, takes its pending levels.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any, ClassVar

from pyvisa.resources import MessageBasedResource

from ._model import PANEL, Session, SimInstrument

__all__ = ["E3631A_PROFILE", "E3631A_RESOURCE", "SimE3631a"]

E3631A_RESOURCE = "TCPIP0::sim-e3631a::5025::SOCKET"
E3631A_PROFILE = "e3631a"

#: A selection query, rendered with the output it was asked under.
_SELECTION = re.compile(r"INST:(N?)SEL\? \(@(\d)\)")
_MEASURE = re.compile(r"MEAS:(VOLT|CURR)\? \(@(\d)\)")
_NAMES = {1: "P6V", 2: "P25V", 3: "N25V"}
#: A +25V or -25V voltage setpoint; in track mode the other takes it with the opposite sign.
_TRACKED = re.compile(r"VOLT ([-+0-9.E]+),\(@([23])\)")
#: *SAV as the model classifies it: with the output selected (the profile's channel list).
_SAV = re.compile(r"\*SAV (\d)(?:,\(@\d\))?")
_RCL = re.compile(r"\*RCL (\d)")
#: What *SAV stores and *RCL restores (User's Guide, chapter 4, *SAV: "INST[:SEL],
#: VOLT[:IMM], CURR[:IMM], OUTP[:STAT], OUTP:TRAC, TRIG:SOUR, and TRIG:DEL"): the selected
#: output too, so a bare VOLT after *RCL acts on the output the recalled state selects.
_STORED = ("selected", "output", "set_outp_trac", "set_trig_sour", "set_trig_del",
           *(f"ch{ch}_{f}" for ch in (1, 2, 3) for f in ("voltage", "current")))
#: A pending triggered level stored, and its query.
_TRIGGERED = re.compile(r"(VOLT|CURR):TRIG ([-+0-9.E]+),\(@(\d)\)")
_TRIGGERED_Q = re.compile(r"(VOLT|CURR):TRIG\? \(@(\d)\)")


class SimE3631a(SimInstrument):
    """Keysight E3631A in its SCPI command set; ``SIM:LOAD<n>`` is output n's DUT."""

    profile = E3631A_PROFILE
    resource_name = E3631A_RESOURCE
    rst_keeps: ClassVar[frozenset[str]] = frozenset(
        {"ese", "sre", "saved_slot", "recalled_slot", "ch1_load", "ch2_load", "ch3_load"})

    def __init__(self, resource: MessageBasedResource, definition: Mapping[str, Any]) -> None:
        super().__init__(resource, definition)
        self._slots: dict[int, dict[str, int | float | str]] = {}
        #: (VOLT|CURR, output) with a pending triggered level; whether INIT armed it.
        self._pending: set[tuple[str, int]] = set()
        self._armed = False
        self._delays: list[threading.Timer] = []

    def close(self) -> None:
        for delay in self._delays:
            delay.cancel()
        super().close()

    def _fire(self) -> None:
        """The trigger, after its delay: the selected output and those coupled to it take
        their pending levels."""
        with self._lock:
            selected = self._selected()
            word = str(self._get("set_inst_coup")).upper()
            coupled = ([1, 2, 3] if word.startswith("ALL") else
                       [int(d) for d in re.findall(r"\d", word)] + [int(n) for w, n in (
                           ("P6V", 1), ("P25V", 2), ("N25V", 3)) if w in word])
            outputs = set(coupled) | {selected} if selected in coupled else {selected}
            for kind, ch in sorted(self._pending):
                if ch in outputs:
                    field = "voltage" if kind == "VOLT" else "current"
                    self._set(f"ch{ch}_{field}",
                              float(self._get(f"set_{kind.lower()}_trig_ch{ch}")))
                    self._pending.discard((kind, ch))

    def _start(self) -> None:
        self._armed = False
        delay = threading.Timer(float(self._get("set_trig_del")), self._fire)
        delay.daemon = True
        self._delays = [d for d in self._delays if d.is_alive()] + [delay]
        delay.start()

    def _model_write(self, canonical: str) -> bool:
        if m := _SAV.fullmatch(canonical):
            self._slots[int(m[1])] = {name: self._get(name) for name in _STORED}
            return True
        if m := _TRIGGERED.fullmatch(canonical):
            self._pending.add((m[1], int(m[3])))
            return False  # stored by its setting
        if canonical == "INIT":
            self._armed = True
            if str(self._get("set_trig_sour")).upper().startswith("IMM"):
                self._start()
            return True
        if canonical == "*TRG":
            if self._armed:
                self._start()
            return True
        if canonical == "*RST":
            self._pending.clear()
            self._armed = False
        return False

    def handle_message(self, message: str, session: Session = PANEL) -> str | None:
        if "(@" in message:  # chapter 4: outputs are selected, never listed
            self.push_error(-101, "Invalid character; the E3631A takes no channel list")
            return None
        return super().handle_message(message, session)

    def terminals(self, channel: int) -> tuple[float, float]:
        """(volts, amps) at output ``channel``'s terminals now: what the DUT sees."""
        with self._lock:
            return self._terminals(channel)

    def _terminals(self, channel: int) -> tuple[float, float]:
        if not int(self._get("output")):
            return 0.0, 0.0
        volts = float(self._get(f"ch{channel}_voltage"))
        load = float(self._get(f"ch{channel}_load"))
        amps = min(abs(volts) / load, float(self._get(f"ch{channel}_current")))
        return (amps * load if volts >= 0 else -amps * load), amps

    def _after_write(self, canonical: str) -> None:
        super()._after_write(canonical)
        if (m := _TRACKED.fullmatch(canonical)) and int(self._get("set_outp_trac")):
            self._set(f"ch{5 - int(m[2])}_voltage", -float(m[1]))

    def _link(self, canonical: str) -> None:
        if m := _RCL.fullmatch(canonical):
            # *RCL: "You recall *RST states or values of the power supply from a memory
            # location that was not previously specified as a storage location."
            saved = self._slots.get(int(m[1]))
            for name in _STORED:
                self._set(name, saved[name] if saved else self._reset_value(name))

    def _selected(self) -> int:
        return int(self._get("selected"))

    def _model_answer(self, canonical: str) -> str | None:
        if m := _SELECTION.fullmatch(canonical):
            channel = int(m[2])
            return str(channel) if m[1] else _NAMES[channel]
        if m := _MEASURE.fullmatch(canonical):
            volts, amps = self._terminals(int(m[2]))
            return f"{volts if m[1] == 'VOLT' else amps:+.8E}"
        if (m := _TRIGGERED_Q.fullmatch(canonical)) and (m[1], int(m[2])) not in self._pending:
            field = "voltage" if m[1] == "VOLT" else "current"  # unset: the immediate level
            return f"{float(self._get(f'ch{m[2]}_{field}')):+.8E}"
        return None
