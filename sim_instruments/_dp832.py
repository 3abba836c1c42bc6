"""The simulated Rigol DP832 triple-output supply, as the DP800 Series Programming Guide
(chapter 2) describes it: channels named as a parameter word (``:OUTPut CH1,ON``,
``:MEASure:VOLTage? CH2``, ``:APPLy CH3,5,1``) or by a ``:SOURce<n>`` suffix; left out, both
mean the instrument's own selected channel (``:INSTrument CH2``, ``:INST:NSEL 2``); booleans
answered ``ON``/``OFF``. Each output drives a resistive DUT (``SIM:LOAD<n>``).

The timer (DP800 guide, :TIMEr): ``:TIMEr:PARAmeter <group>,<volts>,<amps>,<seconds>`` stores
a group of the selected channel; ``:TIMEr ON`` applies the groups in turn, each for its time,
long after the command that started them. The delayer (``:DELAY``) is not modelled.

The trigger (DP800 guide, :TRIGger, :SOURce:VOLTage:TRIGgered): ``:TRIGger`` or ``*TRG``
applies, after ``:TRIGger:DELay`` (1 s at least), the triggered levels of every channel one
was programmed on since the last trigger.

The trigger input (DP800 guide, :TRIGger:IN): a data line of the rear digital I/O, once
enabled (``:TRIGger:IN D0,ON``), switches its source channel's output (``:TRIGger:IN:SOURce``,
CH1 by default) on, off or over (``:TRIGger:IN:RESPonse``) when its input signal meets the
trigger type; ``SIM:EDGE D<n>`` is that signal arriving at line n.

The model keeps its own selection, shared by every interface like the instrument's, and
classifies each message under it; a message with a channel list is refused (the DP832 takes
none), so a test proves the gateway writes every channel out in the DP832's own spelling.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any, ClassVar

from pyvisa.resources import MessageBasedResource

from ._model import PANEL, Session, SimInstrument

__all__ = ["DP832_PROFILE", "DP832_RESOURCE", "SimDp832"]

DP832_RESOURCE = "TCPIP0::sim-dp832::5025::SOCKET"
DP832_PROFILE = "dp832"

#: A selection query, rendered with the channel it was asked under.
_SELECTION = re.compile(r"INST:(N?)SEL\? \(@(\d)\)")
_MEASURE = re.compile(r"MEAS:(VOLT|CURR|POWE|ALL)\? CH(\d)")
_APPLIED = re.compile(r"APPL\? CH(\d)")
_MODE = re.compile(r"OUTP:MODE\? CH(\d)")
_OUTPUT = re.compile(r"OUTP\? CH(\d)")
#: :OUTPut:TRACk[:STATe] [CH1|CH2,]ON|OFF: kept by the model, one state per channel.
_TRACK = re.compile(r"OUTP:TRAC(\?)? CH(\d)(?:,(ON|OFF))?")
#: A CH1 or CH2 setpoint; while either's track is on, the other follows (DP800 guide).
_SETPOINT = re.compile(r"SOUR([12]):(VOLT|CURR) ([-+0-9.E]+)")
#: Clearing a protection that never trips here: taken, nothing to clear.
_CLEAR = re.compile(r"(?:SOUR\d:(?:VOLT|CURR):PROT|OUTP:O[VC]P):CLE(?: CH\d)?")
#: :TIMEr:PARAmeter and :TIMEr[:STATe], short or long, with the channel the gateway names.
_NUM = r"([-+0-9.E]+)"
_TIMER_SET = re.compile(rf"TIME(?:R)?:PARA(?:METER)? {_NUM},{_NUM},{_NUM},{_NUM}(?:,\(@(\d)\))?")
_TIMER_RUN = re.compile(r"TIME(?:R)?(?::STAT(?:E)?)? (?:CH(\d),)?(ON|OFF|1|0)")
#: A triggered level stored (pending until the next trigger), and the trigger itself.
_TRIGGERED = re.compile(r"SOUR(\d):(VOLT|CURR):TRIG ([-+0-9.E]+)")
_FIRE = frozenset({"TRIG", "*TRG"})
#: The trigger input: a line enabled, its response, its source; an edge at a line.
_TRIG_IN = re.compile(r"TRIG:IN(?::ENAB)?(\?)? D([0-3])(?:,(ON|OFF|1|0))?")
_TRIG_IN_RESP = re.compile(r"TRIG:IN:RESP(\?)? D([0-3])(?:,(ON|OFF|ALTER))?")
_TRIG_IN_SOUR = re.compile(r"TRIG:IN:SOUR(\?)? D([0-3])(?:,CH([1-3]))?")
_EDGE = re.compile(r"SIM:EDGE D([0-3])")
#: The rating each channel's APPL? names (DP800 guide: ``CH1:30V/3A,5.000,1.0000``).
_RATING = {1: "30V/3A", 2: "30V/3A", 3: "5V/3A"}


class SimDp832(SimInstrument):
    """Rigol DP832 in its SCPI command set; ``SIM:LOAD<n>`` is output n's DUT in ohms."""

    profile = DP832_PROFILE
    resource_name = DP832_RESOURCE
    rst_keeps: ClassVar[frozenset[str]] = frozenset(
        {"ese", "sre", "saved_slot", "recalled_slot", "ch1_load", "ch2_load", "ch3_load"})

    def __init__(self, resource: MessageBasedResource, definition: Mapping[str, Any]) -> None:
        super().__init__(resource, definition)
        self._track = {1: "OFF", 2: "OFF", 3: "OFF"}
        #: Timer groups per channel: group -> (volts, amps, seconds); the running timer.
        self._groups: dict[int, dict[int, tuple[float, float, float]]] = {1: {}, 2: {}, 3: {}}
        self._timer: threading.Timer | None = None
        #: (VOLT|CURR, channel) with a triggered level programmed since the last trigger.
        self._pending: set[tuple[str, int]] = set()
        self._delays: list[threading.Timer] = []
        #: Each data line's trigger input: [enabled, response, source channel].
        self._lines: dict[int, list[Any]] = {n: [False, "OFF", 1] for n in range(4)}

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for delay in self._delays:
            delay.cancel()
        super().close()

    def _run_timer(self, channel: int, group: int) -> None:
        """Apply ``group`` (and each later one, after its time) as the channel's levels."""
        with self._lock:
            groups = self._groups[channel]
            due = [g for g in sorted(groups) if g >= group and groups[g][2] > 0]
            if not due:
                self._timer = None
                return
            volts, amps, seconds = groups[due[0]]
            self._set(f"ch{channel}_voltage", volts)
            self._set(f"ch{channel}_current", amps)
            self._timer = threading.Timer(seconds, self._run_timer, (channel, due[0] + 1))
            self._timer.daemon = True
            self._timer.start()

    def handle_message(self, message: str, session: Session = PANEL) -> str | None:
        if "(@" in message:  # the DP832 names channels CH1..CH3, never in a list
            self.push_error(-101, "Invalid character; the DP832 takes no channel list")
            return None
        return super().handle_message(message, session)

    def terminals(self, channel: int) -> tuple[float, float]:
        """(volts, amps) at output ``channel``'s terminals now: what the DUT sees."""
        with self._lock:
            return self._terminals(channel)

    def _terminals(self, channel: int) -> tuple[float, float]:
        if not int(self._get(f"ch{channel}_output")):
            return 0.0, 0.0
        volts = float(self._get(f"ch{channel}_voltage"))
        load = float(self._get(f"ch{channel}_load"))
        amps = min(volts / load, float(self._get(f"ch{channel}_current")))
        return amps * load, amps

    def _selected(self) -> int:
        return int(self._get("selected"))

    def _after_write(self, canonical: str) -> None:
        super()._after_write(canonical)
        if (m := _SETPOINT.fullmatch(canonical)) and "ON" in (self._track[1], self._track[2]):
            other = 3 - int(m[1])
            self._set(f"ch{other}_{'voltage' if m[2] == 'VOLT' else 'current'}", float(m[3]))

    def _fire(self, pending: set[tuple[str, int]]) -> None:
        """Apply the triggered levels ``pending``: what a trigger does after its delay."""
        with self._lock:
            for kind, ch in sorted(pending):
                field = "voltage" if kind == "VOLT" else "current"
                level = float(self._get(f"set_sour{ch}_{kind.lower()}_trig_ch{ch}"))
                self._set(f"ch{ch}_{field}", level)
                # A level a trigger applies is a setpoint changed: tracking moves the other.
                if ch in (1, 2) and "ON" in (self._track[1], self._track[2]):
                    self._set(f"ch{3 - ch}_{field}", level)

    def _trigger_in(self, canonical: str) -> str | None:
        """The trigger input's settings, set or answered; an edge at a line acts on its
        source channel's output as its response says. None: not one of them."""
        if m := _EDGE.fullmatch(canonical):
            enabled, response, ch = self._lines[int(m[1])]
            if enabled and response != "OFF":
                on = response == "ON" or not int(self._get(f"ch{ch}_output"))
                self._set(f"ch{ch}_output", int(on))
            elif enabled:
                self._set(f"ch{ch}_output", 0)
            return ""
        for regex, slot in ((_TRIG_IN, 0), (_TRIG_IN_RESP, 1), (_TRIG_IN_SOUR, 2)):
            if m := regex.fullmatch(canonical):
                line = self._lines[int(m[2])]
                if m[1]:
                    return ("ON" if line[0] else "OFF", str(line[1]), f"CH{line[2]}")[slot]
                if m[3] is not None:
                    line[slot] = (m[3] in ("ON", "1"), m[3], int(m[3]) if slot == 2 else 0)[slot]
                return ""
        return None

    def _model_write(self, canonical: str) -> bool:
        if self._trigger_in(canonical) is not None:
            return True
        if m := _TRIGGERED.fullmatch(canonical):
            self._pending.add((m[2], int(m[1])))
            return False  # stored by its setting
        if canonical in _FIRE:
            fired, self._pending = set(self._pending), set()
            delay = threading.Timer(float(self._get("set_trig_del")), self._fire, (fired,))
            delay.daemon = True
            self._delays = [d for d in self._delays if d.is_alive()] + [delay]
            delay.start()
            return True
        if m := _TIMER_SET.fullmatch(canonical):
            channel = int(m[5]) if m[5] else self._selected()
            self._groups[channel][int(float(m[1]))] = (float(m[2]), float(m[3]), float(m[4]))
            return True
        if m := _TIMER_RUN.fullmatch(canonical):
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if m[2] in ("ON", "1"):
                self._run_timer(int(m[1]) if m[1] else self._selected(), 1)
            return True
        if (m := _TRACK.fullmatch(canonical)) and m[3]:
            self._track[int(m[2])] = m[3]
            return True
        if canonical == "*RST":
            self._track = {1: "OFF", 2: "OFF", 3: "OFF"}
            self._lines = {n: [False, "OFF", 1] for n in range(4)}
        return bool(_CLEAR.fullmatch(canonical))

    def _model_answer(self, canonical: str) -> str | None:
        if answer := self._trigger_in(canonical):
            return answer
        if m := _SELECTION.fullmatch(canonical):
            channel = int(m[2])
            return str(channel) if m[1] else f"CH{channel}"
        if m := _MEASURE.fullmatch(canonical):
            volts, amps = self._terminals(int(m[2]))
            values = {"VOLT": [volts], "CURR": [amps], "POWE": [volts * amps],
                      "ALL": [volts, amps, volts * amps]}[m[1]]
            return ",".join(f"{v:.4f}" for v in values)
        if m := _APPLIED.fullmatch(canonical):
            ch = int(m[1])
            return (f"CH{ch}:{_RATING[ch]},{float(self._get(f'ch{ch}_voltage')):.3f},"
                    f"{float(self._get(f'ch{ch}_current')):.4f}")
        if m := _OUTPUT.fullmatch(canonical):  # DP800 guide: answered ON or OFF
            return "ON" if int(self._get(f"ch{m[1]}_output")) else "OFF"
        if m := _MODE.fullmatch(canonical):
            volts, amps = self._terminals(int(m[1]))
            limited = amps > 0 and amps >= float(self._get(f"ch{m[1]}_current"))
            return "CC" if limited else "CV"
        if (m := _TRACK.fullmatch(canonical)) and m[1]:
            return self._track[int(m[2])]
        return None
