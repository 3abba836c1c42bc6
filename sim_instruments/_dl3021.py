"""The simulated Rigol DL3021 DC electronic load, as the DL3000 Series Programming Guide
(chapter 2) describes it: one input, no channel list and no suffix; ``:INP ON`` draws from
the DUT. In the CC function the load draws its CC level; in CV it pulls the DUT down to its
CV level, drawing up to its current limit (VOLT:ILIM) while the DUT is above it; in CR the
DUT's voltage over the resistance, in CP the power over the voltage, each up to its own
current limit (RES:ILIM, POW:ILIM): the guide's chapter 2, :SOURce:<function>:ILIMit.

Short-circuit mode (guide, [:SOURce]:INPut:SHORt[:STATe]): with the input on, the load draws
as much current as it can, the top of its current range (40 A, or 4 A on the low range),
whatever its levels say.

List mode (guide, [:SOURce]:LIST:LEVel|WIDth <step>,<value> and [:SOURce]:FUNCtion:MODE
LIST): a trigger (``TRIG``, ``*TRG``) runs the steps in turn, each drawing its level (CC) for
its width in seconds, long after the command that fired it.

The DUT is a source of ``SIM:SOURCE`` volts (12 V). A message with a channel list is refused
as the DL3021 refuses it, so a test proves the gateway sends its units bare.
"""

from __future__ import annotations

import re
import threading
from typing import Any, ClassVar

from ._model import PANEL, Session, SimInstrument

__all__ = ["DL3021_PROFILE", "DL3021_RESOURCE", "SimDl3021"]

DL3021_RESOURCE = "TCPIP0::sim-dl3021::5025::SOCKET"
DL3021_PROFILE = "dl3021"

_MEASURE = re.compile(r"MEAS:(VOLT|CURR|POW|RES)\?(?: \(@1\))?")
#: [:SOURce]:INPut:SHORt[:STATe], short or long, as the profile renders it or a client sent it.
_LIST = re.compile(r"(?:SOUR(?:CE)?:)?LIST:(LEV|LEVEL|WID|WIDTH) ([-+0-9.E]+),([-+0-9.E]+)")
_SHORT = re.compile(r"(?:SOUR(?:CE)?:)?INP(?:UT)?:SHOR(?:T)?(?::STAT(?:E)?)?(\?| (\S+))")


class SimDl3021(SimInstrument):
    """Rigol DL3021 in its SCPI command set; ``SIM:SOURCE`` is the DUT's voltage."""

    profile = DL3021_PROFILE
    resource_name = DL3021_RESOURCE
    rst_keeps: ClassVar[frozenset[str]] = frozenset(
        {"ese", "sre", "saved_slot", "recalled_slot", "source"})

    def handle_message(self, message: str, session: Session = PANEL) -> str | None:
        if "(@" in message:  # one input: no channel list
            self.push_error(-101, "Invalid character; the DL3021 takes no channel list")
            return None
        return super().handle_message(message, session)

    short = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: List steps: step -> [level in amps, width in seconds]; the step running, if any.
        self._steps: dict[int, list[float]] = {}
        self._running: float | None = None
        self._timer: threading.Timer | None = None

    def close(self) -> None:
        self._stop_list()
        super().close()

    def _stop_list(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._running = None, None

    def _run_list(self, step: int) -> None:
        with self._lock:
            due = [n for n in sorted(self._steps) if n >= step and self._steps[n][1] > 0]
            if not due:
                self._timer, self._running = None, None  # the list ends: back to its levels
                return
            level, width = self._steps[due[0]]
            self._running = level
            self._timer = threading.Timer(width, self._run_list, (due[0] + 1,))
            self._timer.daemon = True
            self._timer.start()

    def drawn(self) -> tuple[float, float]:
        """(volts, amps) at the input now: what the DUT sees."""
        with self._lock:
            return self._drawn()

    def _drawn(self) -> tuple[float, float]:
        volts = float(self._get("source"))
        if not int(self._get("ch1_input")):
            return volts, 0.0
        if self._running is not None:  # a list step (CC)
            return volts, self._running
        if self.short:  # all it can draw: the top of its current range
            return volts, 4.0 if 0 < float(self._get("set_curr_rang")) <= 4 else 40.0
        function = str(self._get("set_func"))
        if function == "CURR":
            return volts, float(self._get("ch1_current"))
        if function == "VOLT":
            wanted = float("inf") if volts > float(self._get("ch1_voltage")) else 0.0
            return volts, min(wanted, float(self._get("set_volt_ilim_ch1")))
        if function == "RES":
            wanted = volts / max(float(self._get("set_res")), 1e-9)
            return volts, min(wanted, float(self._get("set_res_ilim_ch1")))
        if function == "POW":
            wanted = float(self._get("set_pow")) / volts if volts > 0 else 0.0
            return volts, min(wanted, float(self._get("set_pow_ilim_ch1")))
        return volts, 0.0

    def _model_write(self, canonical: str) -> bool:
        if (m := _SHORT.fullmatch(canonical)) and m[2] is not None:
            self.short = m[2] in ("ON", "1", "1.0")
            return True
        if m := _LIST.fullmatch(canonical):
            step = self._steps.setdefault(int(float(m[2])), [0.0, 0.0])
            step[0 if m[1].startswith("LEV") else 1] = float(m[3])
            return True
        if canonical == "*RST":
            self.short = False
            self._stop_list()
        return False

    def _link(self, canonical: str) -> None:
        if canonical in ("TRIG", "*TRG") and str(self._get("set_func_mode")) == "LIST":
            self._stop_list()
            self._run_list(1)

    def _model_answer(self, canonical: str) -> str | None:
        if (m := _SHORT.fullmatch(canonical)) and m[1] == "?":
            return "1" if self.short else "0"
        if m := _MEASURE.fullmatch(canonical):
            volts, amps = self._drawn()
            value = {"VOLT": volts, "CURR": amps, "POW": volts * amps,
                     "RES": volts / amps if amps else 9.9e37}[m[1]]
            return f"{value:f}"
        return None
