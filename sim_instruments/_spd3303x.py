"""The simulated Siglent SPD3303X supply, as its Programming Guide describes it: CH1 and CH2
programmed by a header prefix (``CH1:VOLTage 5``) or, left out, on the instrument's own
selection (``INSTrument CH2``); ``OUTPut CH1,ON`` switches a channel (CH3 the fixed 5 V
output); no output-state query, only ``SYSTem:STATus?``, a hex word: bits 0 and 1 CH1's and
CH2's CC mode, bits 2-3 the tracking mode (01 independent, 11 series, 10 parallel), bits 4
and 5 CH1's and CH2's output. Each output drives a resistive DUT (``SIM:LOAD<n>``).

A message with a channel list is refused (the SPD3303X takes none).
"""

from __future__ import annotations

import re
from typing import ClassVar

from ._model import PANEL, Session, SimInstrument

__all__ = ["SPD3303X_PROFILE", "SPD3303X_RESOURCE", "SimSpd3303x"]

SPD3303X_RESOURCE = "TCPIP0::sim-spd3303x::5025::SOCKET"
SPD3303X_PROFILE = "spd3303x"

_SELECTION = re.compile(r"INST\? \(@(\d)\)")
_MEASURE = re.compile(r"MEAS:(VOLT|CURR|POWE)\? CH(\d)")
#: OUTPut:TRACK 0|1|2 -> bits 2-3 of SYSTem:STATus? (independent, series, parallel).
_TRACK_BITS = {0: 0b01, 1: 0b11, 2: 0b10}
#: CH3's fixed voltage (its switch at 5 V).
CH3_VOLTS = 5.0


class SimSpd3303x(SimInstrument):
    """Siglent SPD3303X in its SCPI command set; ``SIM:LOAD<n>`` is output n's DUT in ohms."""

    profile = SPD3303X_PROFILE
    resource_name = SPD3303X_RESOURCE
    rst_keeps: ClassVar[frozenset[str]] = frozenset(
        {"saved_slot", "recalled_slot", "ch1_load", "ch2_load", "ch3_load"})

    def handle_message(self, message: str, session: Session = PANEL) -> str | None:
        if "(@" in message:  # channels are CH1..CH3, never a list
            self.push_error(-101, "Invalid character; the SPD3303X takes no channel list")
            return None
        return super().handle_message(message, session)

    def terminals(self, channel: int) -> tuple[float, float]:
        """(volts, amps) at output ``channel``'s terminals now: what the DUT sees."""
        with self._lock:
            return self._terminals(channel)

    def _terminals(self, channel: int) -> tuple[float, float]:
        if not int(self._get(f"ch{channel}_output")):
            return 0.0, 0.0
        load = float(self._get(f"ch{channel}_load"))
        if channel == 3:
            return CH3_VOLTS, CH3_VOLTS / load
        volts = float(self._get(f"ch{channel}_voltage"))
        amps = min(volts / load, float(self._get(f"ch{channel}_current")))
        return amps * load, amps

    def _selected(self) -> int:
        return int(self._get("selected"))

    def _status(self) -> int:
        word = _TRACK_BITS[int(self._get("track"))] << 2
        for ch in (1, 2):
            amps = self._terminals(ch)[1]
            if amps > 0 and amps >= float(self._get(f"ch{ch}_current")):
                word |= 1 << (ch - 1)  # CC
            if int(self._get(f"ch{ch}_output")):
                word |= 1 << (ch + 3)  # bit 4: CH1 on, bit 5: CH2 on
        return word

    def _model_write(self, canonical: str) -> bool:
        if canonical.startswith("OUTP:TRACK "):  # kept for SYST:STAT?'s bits 2-3
            self._set("track", int(canonical.split(" ", 1)[1]))
            return True
        return False

    def _model_answer(self, canonical: str) -> str | None:
        if m := _SELECTION.fullmatch(canonical):
            return f"CH{m[1]}"
        if m := _MEASURE.fullmatch(canonical):
            volts, amps = self._terminals(int(m[2]))
            value = {"VOLT": volts, "CURR": amps, "POWE": volts * amps}[m[1]]
            return f"{value:.3f}"
        if canonical == "SYST:STAT?":
            return f"0x{self._status():04X}"
        return None
