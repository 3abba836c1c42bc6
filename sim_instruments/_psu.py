"""The simulated Keysight E36312A of the default bench (:class:`SimPsu`): three channels
into resistive loads, OVP trips, *SAV/*RCL, output tracking and fall delay, and the
transient system (STEP triggers, lists run on timers).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any

from pyvisa.resources import MessageBasedResource

from ._files import StateFiles
from ._model import SimInstrument
from ._resources import PSU_PROFILE, PSU_RESOURCE

__all__ = ["SimPsu"]

_NSEL = re.compile(r"INST:NSEL (\d)")
_SEL = re.compile(r"INST:SEL CH(\d)")
_CLEAR_TRIP = re.compile(r"(?:VOLT|OUTP):PROT:CLE \(@(\d)\)")
_FETCH = re.compile(r"FETC:(VOLT|CURR)\? (\(@\d\))")
_MODE = re.compile(r"STAT:OPER:INST:ISUM(\d):COND\?")
_SAV = re.compile(r"\*SAV (\d+)")
_RCL = re.compile(r"\*RCL (\d+)")
_VOLT = re.compile(r"VOLT ([-+0-9.E]+),\(@2\)")
_OFF = re.compile(r"OUTP 0,\(@(\d)\)")
#: A trigger of the transient system: every channel (*TRG) or one (TRIG (@n)).
_TRIGGER = re.compile(r"\*TRG|TRIG \(@(\d)\)")
#: A signal arriving at a pin of the rear digital port (sim only, never from an interface).
_EDGE = re.compile(r"SIM:EDGE PIN([1-3])")


class SimPsu(SimInstrument):
    """Keysight E36312A: three channels, each driving a resistive load (``SIM:LOAD``).

    While an output is on, the channel regulates to its voltage setpoint unless the load
    would draw more than the current limit (then it limits current). A measured voltage above
    the OVP level trips the channel, while its protection is on (``VOLT:PROT:STAT``, on after
    *RST): its output reads off while tripped. Clearing the trip (``OUTP:PROT:CLE``,
    ``VOLT:PROT:CLE``) restores the output to the state it was in before the fault, at
    whatever levels the channel holds then (Keysight's wording for OUTPut:PROTection:CLEar:
    "The output is restored to the state it was in before the fault condition occurred",
    N6900/N7900 Operating and Service Guide, and E3632A/E3633A User's Guides,
    VOLTage:PROTection:CLEar; the E36300 is taken to do the same, unverified on a unit).
    ``OUTP 0`` while tripped leaves it off after the clear; ``*RST`` and ``*RCL`` forget.
    ``OUTP 0`` waits the channel's ``OUTP:DEL:FALL`` before the output goes off, as the
    Keysight supplies' turn-off sequencing does (N6700 guide, OUTPut:DELay:FALL: "affects
    on-to-off transitions including changes in the OUTPut:STATe").

    A trigger (``TRIG (@n)``, ``*TRG``) applies what the channel's mode says (E36300 guide,
    VOLTage:MODE; N6900 guide, LIST): STEP, the triggered levels (``VOLT:TRIG``,
    ``CURR:TRIG``); LIST, the list's points (_run_list). The arming (``INIT``) is not
    modelled. A triggered level never set answers 0 (unverified: the E3631A's answers the
    immediate level; the profile assumes neither, it reads the level and judges it).

    The rear digital port: a pin whose function is ONCouple turns the outputs on when an
    output-on signal arrives at it (Keysight's output couple control: "OnCouple and
    OffCouple signals enable and disable the output"), OFFCouple turns them off;
    ``execute("SIM:EDGE PIN<n>")`` is that signal arriving at pin n (every output, as the
    E36300 has no per-channel couple setting; unverified).
    """

    profile = PSU_PROFILE
    resource_name = PSU_RESOURCE
    lockable = True
    rst_keeps = frozenset({"ese", "sre", "saved_slot", "recalled_slot",
                           "ch1_load", "ch2_load", "ch3_load"})
    channels = (1, 2, 3)
    #: Fields *SAV stores and *RCL restores, per channel.
    saved_fields = ("voltage", "current", "ovp", "output")

    def __init__(self, resource: MessageBasedResource, definition: Mapping[str, Any]) -> None:
        super().__init__(resource, definition)
        # The memory of *SAV lives here: pyvisa-sim cannot copy one property to another.
        self._slots: dict[int, dict[str, int | float | str]] = {}
        #: MMEM:STOR:STAT / MMEM:LOAD:STAT keep the same fields in state files.
        self.state_files = StateFiles()
        #: A list running per channel: the voltage of its present point, and its timer.
        self._list_level: dict[int, float] = {}
        self._list_timer: dict[int, threading.Timer] = {}
        #: Channels a protection trip switched off while on: a clear switches them back on.
        self._restore: set[int] = set()

    def close(self) -> None:
        for ch in list(self._list_timer):
            self._stop_list(ch)
        super().close()

    def _stop_list(self, channel: int) -> None:
        timer = self._list_timer.pop(channel, None)
        if timer is not None:
            timer.cancel()
        self._list_level.pop(channel, None)

    def _run_list(self, channel: int, point: int) -> None:
        """Keysight's list (N6700 guide, LIST subsystem; the E36300 has the same): in LIST
        mode a trigger steps the output through the voltage points, each for its dwell;
        the immediate level, what ``VOLT?`` answers, is not changed, and the output returns
        to it when the list ends."""
        with self._lock:
            volts = [float(v) for v in str(self._get(f"set_list_volt_ch{channel}")).split(",")]
            dwell = [float(v) for v in str(self._get(f"set_list_dwel_ch{channel}")).split(",")]
            if point >= len(volts):
                self._stop_list(channel)
                self._settle()
                return
            self._list_level[channel] = volts[point]
            seconds = dwell[point] if point < len(dwell) else dwell[-1]
            timer = threading.Timer(seconds, self._run_list, (channel, point + 1))
            timer.daemon = True
            self._list_timer[channel] = timer
            timer.start()
            self._settle()

    def probe(self, channel: int) -> tuple[float, float]:
        """(measured volts, measured amps) at ``channel``'s terminals, for a DMM."""
        with self._lock:
            return (float(self._get(f"ch{channel}_measured_voltage")),
                    float(self._get(f"ch{channel}_measured_current")))

    def _selected(self) -> int:
        return int(self._ask("INST:NSEL?"))

    def _model_answer(self, canonical: str) -> str | None:
        if m := _FETCH.fullmatch(canonical):  # the last measurement: here, a fresh one
            return self._ask(f"MEAS:{m[1]}? {m[2]}")
        if m := _MODE.fullmatch(canonical):  # bit 0 CV, bit 1 CC (the profile's mode field)
            return str(self._mode(int(m[1])))
        return None

    def _mode(self, channel: int) -> int:
        """The Operation Instrument Summary condition: CV (1) while the voltage setpoint
        regulates, CC (2) while the load would draw more than the current limit, 0 off."""
        p = f"ch{channel}_"
        if not self._get(p + "output"):
            return 0
        limited = float(self._get(p + "current")) * float(self._get(p + "load"))
        return 2 if limited < float(self._get(p + "voltage")) else 1

    def _model_write(self, canonical: str) -> bool:
        if m := _EDGE.fullmatch(canonical):
            function = str(self._get(f"set_dig_pin{m[1]}_func_ch{m[1]}")).upper()
            if function.startswith(("ONC", "OFFC")):
                for ch in self.channels:
                    self._set(f"ch{ch}_output", int(function.startswith("ONC")))
            return True
        if _CLEAR_TRIP.fullmatch(canonical) and canonical.startswith("OUTP"):
            return True  # OUTP:PROT:CLE: _link clears the trip, pyvisa-sim has no dialogue
        if (m := _OFF.fullmatch(canonical)) and (
                delay := float(self._get(f"set_outp_del_fall_ch{m[1]}"))) > 0:
            timer = threading.Timer(delay, self._fall, (int(m[1]),))
            timer.daemon = True
            timer.start()
            return True  # still on until the delay has passed
        return False

    def _coupled(self, channel: int) -> list[int]:
        """The channels one channel's trigger steps: INSTrument:COUPle couples the triggers
        of the channels it names (ALL, NONE, or a list) (E36300 guide, INSTrument:COUPle)."""
        word = str(self._get("set_inst_coup")).upper()
        joined = (list(self.channels) if word.startswith("ALL") else
                  [int(d) for d in re.findall(r"\d", word) if int(d) in self.channels])
        return joined if channel in joined else [channel]

    def _trigger(self, channel: int) -> None:
        """STEP applies the triggered levels (E36300 guide, VOLTage:MODE); LIST runs the
        list (_run_list)."""
        for kind, name in (("volt", "voltage"), ("curr", "current")):
            if str(self._get(f"set_{kind}_mode_ch{channel}")).upper().startswith("STEP"):
                level = float(self._get(f"set_{kind}_trig_ch{channel}"))
                self._set(f"ch{channel}_{name}", level)
        if str(self._get(f"set_volt_mode_ch{channel}")).upper().startswith("LIST"):
            self._stop_list(channel)
            self._run_list(channel, 0)

    def _fall(self, channel: int) -> None:
        with self._lock:
            self._set(f"ch{channel}_output", 0)
            self._settle()

    def _link(self, canonical: str) -> None:
        if m := _TRIGGER.fullmatch(canonical):
            for ch in ([int(m[1])] if m[1] else self.channels):
                for each in self._coupled(ch):
                    self._trigger(each)
        elif canonical == "*RST":
            for ch in list(self._list_timer):
                self._stop_list(ch)
            self.state_files.folder = ()
            self._restore.clear()
        self._file_link(canonical)
        if m := _NSEL.fullmatch(canonical):
            self._set("selected_name", f"CH{m[1]}")
        elif m := _SEL.fullmatch(canonical):
            self._set("selected", int(m[1]))
        elif m := _CLEAR_TRIP.fullmatch(canonical):
            self._set(f"ch{m[1]}_ovp_tripped", 0)
            if int(m[1]) in self._restore:  # back to the state before the fault
                self._restore.discard(int(m[1]))
                self._set(f"ch{m[1]}_output", 1)
        elif m := _OFF.fullmatch(canonical):
            self._restore.discard(int(m[1]))
        elif canonical == "OUTP:TRAC 1" or (
                _VOLT.fullmatch(canonical) is not None and int(self._get("set_outp_trac"))):
            # E36300 guide, OUTPut:TRACk: CH3 follows CH2's voltage setpoint while on.
            self._set("ch3_voltage", float(self._get("ch2_voltage")))
        elif m := _SAV.fullmatch(canonical):
            self._slots[int(m[1])] = {name: self._get(name) for name in self._saved_names()}
        elif m := _RCL.fullmatch(canonical):
            self._restore.clear()
            saved = self._slots.get(int(m[1]))
            for name in self._saved_names():
                # A slot never saved holds the power-on defaults.
                prop = self._props[name]
                self._set(name, saved[name] if saved else prop.parse(prop.default))
        self._settle()

    def _file_link(self, canonical: str) -> None:
        """MMEM:CDIR, MMEM:STOR:STAT and MMEM:LOAD:STAT on the state files (_files.py)."""
        name = StateFiles.argument(canonical)
        files = self.state_files
        if name is None:
            return
        if canonical.startswith("MMEM:CDIR "):
            files.folder = files.resolve(name)
        elif canonical.startswith("MMEM:STOR:STAT "):
            files.files[files.resolve(name)] = {n: self._get(n) for n in self._saved_names()}
        elif canonical.startswith("MMEM:LOAD:STAT "):
            saved = files.files.get(files.resolve(name))
            for n in self._saved_names():  # as *RCL: a file never saved, the defaults
                prop = self._props[n]
                self._set(n, saved[n] if saved else prop.parse(prop.default))

    def _saved_names(self) -> list[str]:
        return [f"ch{ch}_{field}" for ch in self.channels for field in self.saved_fields]

    def _settle(self) -> None:
        """Recompute every channel's measurements (and trips) from its settings."""
        for ch in self.channels:
            p = f"ch{ch}_"
            on = bool(self._get(p + "output"))
            volts = amps = 0.0
            if on and self._get(p + "ovp_tripped"):
                self._set(p + "output", 0)
                self._restore.add(ch)
                on = False
            if on:
                load = float(self._get(p + "load"))
                limit = float(self._get(p + "current"))
                level = self._list_level.get(ch, float(self._get(p + "voltage")))
                volts = min(level, limit * load)
                amps = volts / load
                if volts > float(self._get(p + "ovp")) and self._get(p + "ovp_enabled"):
                    self._set(p + "ovp_tripped", 1)
                    self._set(p + "output", 0)
                    self._restore.add(ch)
                    volts = amps = 0.0
            self._set(p + "measured_voltage", volts)
            self._set(p + "measured_current", amps)
