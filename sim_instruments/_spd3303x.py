"""The simulated Siglent SPD3303X supply, as its Programming Guide describes it: CH1 and CH2
programmed by a header prefix (``CH1:VOLTage 5``) or, left out, on the instrument's own
selection (``INSTrument CH2``); ``OUTPut CH1,ON`` switches a channel (CH3 the fixed 5 V
output); no output-state query, only ``SYSTem:STATus?``, a hex word: bits 0 and 1 CH1's and
CH2's CC mode, bits 2-3 the tracking mode (01 independent, 11 series, 10 parallel), bits 4
and 5 CH1's and CH2's output. Each output drives a resistive DUT (``SIM:LOAD<n>``).

A message with a channel list is refused (the SPD3303X takes none).

The timer (Programming Guide, TIMEr:SET and TIMEr): ``TIMEr:SET CH1,<group 1-5>,<volts>,
<amps>,<seconds>`` stores a group; ``TIMEr CH1,ON`` applies the groups in turn, each for its
time, long after the command that started them; ``TIMEr CH1,OFF`` stops it where it is.
"""

from __future__ import annotations

import re
import threading
from typing import Any, ClassVar

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
#: The timer's headers, short (the profile's canonical) or as a client spelled them.
_NUM = r"([-+0-9.E]+)"
_TIMER_SET = re.compile(rf"TIME(?:R)?:SET CH([12]),{_NUM},{_NUM},{_NUM},{_NUM}")
_TIMER_ASK = re.compile(rf"TIME(?:R)?:SET\? CH([123])(?:,{_NUM})?")
_TIMER_RUN = re.compile(r"TIME(?:R)? CH([12]),(ON|OFF|1|0)")
#: DHCP ON|OFF: the network set-up, kept by the model (the profile forbids it).
_DHCP = re.compile(r"DHCP (ON|OFF|1|0|1\.0|0\.0)")


class SimSpd3303x(SimInstrument):
    """Siglent SPD3303X in its SCPI command set; ``SIM:LOAD<n>`` is output n's DUT in ohms."""

    profile = SPD3303X_PROFILE
    resource_name = SPD3303X_RESOURCE
    rst_keeps: ClassVar[frozenset[str]] = frozenset(
        {"saved_slot", "recalled_slot", "ch1_load", "ch2_load", "ch3_load"})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: TIMEr:SET groups per channel: group -> (volts, amps, seconds).
        self._groups: dict[int, dict[int, tuple[float, float, float]]] = {1: {}, 2: {}}
        self._timers: dict[int, threading.Timer] = {}
        self._dhcp = False
        #: How SYST:STAT? writes its word: the guide's ``0x0224``; a test sets another
        #: spelling (``{:04X}``, no 0x) or a garbled one.
        self.status_format = "0x{:04X}"

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

    def close(self) -> None:
        for ch in (1, 2):
            self._stop_timer(ch)
        super().close()

    def _stop_timer(self, channel: int) -> None:
        timer = self._timers.pop(channel, None)
        if timer is not None:
            timer.cancel()

    def _run_timer(self, channel: int, group: int) -> None:
        """Apply ``group`` (and each later one, after its time) as the channel's levels."""
        with self._lock:
            groups = self._groups[channel]
            due = [g for g in sorted(groups) if g >= group and groups[g][2] > 0]
            if not due:
                self._timers.pop(channel, None)
                return
            volts, amps, seconds = groups[due[0]]
            self._set(f"ch{channel}_voltage", volts)
            self._set(f"ch{channel}_current", amps)
            timer = threading.Timer(seconds, self._run_timer, (channel, due[0] + 1))
            timer.daemon = True
            self._timers[channel] = timer
            timer.start()

    def _model_write(self, canonical: str) -> bool:
        if m := _DHCP.fullmatch(canonical):
            self._dhcp = m[1] in ("ON", "1", "1.0")
            return True
        if m := _TIMER_SET.fullmatch(canonical):
            self._groups[int(m[1])][int(float(m[2]))] = (float(m[3]), float(m[4]), float(m[5]))
            return True
        if m := _TIMER_RUN.fullmatch(canonical):
            channel = int(m[1])
            self._stop_timer(channel)
            if m[2] in ("ON", "1"):
                self._run_timer(channel, 1)
            return True
        if canonical.startswith("OUTP:TRACK "):  # kept for SYST:STAT?'s bits 2-3
            self._set("track", int(canonical.split(" ", 1)[1]))
            return True
        return False

    def _model_answer(self, canonical: str) -> str | None:
        if m := _SELECTION.fullmatch(canonical):
            return f"CH{m[1]}"
        if canonical == "DHCP?":
            return "1" if self._dhcp else "0"
        if m := _TIMER_ASK.fullmatch(canonical):
            groups = self._groups.get(int(m[1]), {})  # CH3 has no timer: nothing stored
            volts, amps, seconds = groups.get(int(float(m[2] or 1)), (0, 0, 0))
            return f"{volts:.3f},{amps:.3f},{seconds:g}"
        if m := _MEASURE.fullmatch(canonical):
            volts, amps = self._terminals(int(m[2]))
            value = {"VOLT": volts, "CURR": amps, "POWE": volts * amps}[m[1]]
            return f"{value:.3f}"
        if canonical == "SYST:STAT?":
            return self.status_format.format(self._status())
        return None
