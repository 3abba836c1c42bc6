"""The simulated instruments.

pyvisa-sim holds every value. It matches strings exactly and has no linked properties, so
these classes canonicalize each message with ``bench_gate.scpi`` first, hand pyvisa-sim one
canonical unit at a time, and afterwards issue the sim-only ``SIM:`` setters of bench.yaml
that keep linked values in step (measurements follow setpoints, ``*RST`` restores defaults,
``VOLT:PROT:CLE`` clears a trip, ``CONF?`` follows ``CONF:...``).
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import pyvisa
from pyvisa.resources import MessageBasedResource

from bench_gate.scpi import ScpiError, classify

from ._resources import DMM_PROFILE, DMM_RESOURCE, PSU_PROFILE, PSU_RESOURCE

__all__ = ["ERROR_QUEUE_DEPTH", "Probe", "SimDmm", "SimInstrument", "SimPsu"]

#: Errors an instrument holds before the newest is replaced by -350 (SCPI-99 §21.8.1).
ERROR_QUEUE_DEPTH = 20
_OVERFLOW = (-350, '-350,"Queue overflow"')

#: A reading source for the DMM: (volts, amps).
Probe = Callable[[], tuple[float, float]]

_NSEL = re.compile(r"INST:NSEL (\d)")
_SEL = re.compile(r"INST:SEL CH(\d)")
_CLEAR_TRIP = re.compile(r"VOLT:PROT:CLE \(@(\d)\)")
_SAV = re.compile(r"\*SAV (\d+)")
_RCL = re.compile(r"\*RCL (\d+)")

_TYPES: dict[str, type[int] | type[float] | type[str]] = {"int": int, "float": float, "str": str}


def _esr_bit(code: int) -> int:
    """The standard event status bit an error number sets (IEEE 488.2 §11.5.1)."""
    for low, bit in ((-199, 32), (-299, 16), (-399, 8), (-499, 4)):
        if low <= code <= low + 99:
            return bit
    return 0


def _num(value: float) -> str:
    # pyvisa-sim's {:f} fields want a point and digits, never an exponent.
    return f"{value:.9f}"


@dataclass(frozen=True)
class _Prop:
    """One pyvisa-sim property, as bench.yaml declares it."""

    name: str
    getter: str | None
    setter: str | None
    kind: type[int] | type[float] | type[str]
    default: str

    def parse(self, text: str) -> int | float | str:
        return self.kind(float(text)) if self.kind is int else self.kind(text)

    def set_command(self, value: int | float | str) -> str:
        if self.setter is None:
            raise ValueError(f"property {self.name!r} has no setter")
        if self.kind is float:
            return self.setter.replace("{:f}", _num(float(value)))
        return self.setter.format(value)


def _props(device: Mapping[str, Any]) -> dict[str, _Prop]:
    out: dict[str, _Prop] = {}
    for name, spec in device.get("properties", {}).items():
        kind = _TYPES[spec.get("specs", {}).get("type", "str")]
        getter = spec["getter"]["q"].strip() if "getter" in spec else None
        setter = spec["setter"]["q"].strip() if "setter" in spec else None
        out[name] = _Prop(name, getter, setter, kind, spec.get("default", ""))
    return out


def _answerable(device: Mapping[str, Any]) -> frozenset[str]:
    """Every query pyvisa-sim answers; anything else would leave a read waiting."""
    out = {d["q"].strip() for d in device.get("dialogues", ()) if "r" in d}
    out |= {p["getter"]["q"].strip() for p in device.get("properties", {}).values()
            if "getter" in p}
    error = device.get("error", {})
    if isinstance(error, Mapping):
        for key in ("status_register", "error_queue"):
            out |= {entry["q"].strip() for entry in error.get(key, ())}
    return frozenset(out)


def _no_error(device: Mapping[str, Any]) -> str:
    error = device.get("error", {})
    queues = error.get("error_queue", ()) if isinstance(error, Mapping) else ()
    if not queues:
        raise ValueError("the bench definition needs an error_queue for SYST:ERR?")
    return str(queues[0]["default"])


class SimInstrument:
    """One simulated instrument: a pyvisa-sim session plus the links pyvisa-sim lacks.

    Every public method holds the instrument's lock, so messages from different callers
    (socket connections, threads) never interleave.
    """

    profile: ClassVar[str]
    resource_name: ClassVar[str]
    #: Properties ``*RST`` leaves alone (IEEE 488.2 §10.32: enables, saved states, the load).
    rst_keeps: ClassVar[frozenset[str]] = frozenset({"ese", "sre"})

    def __init__(self, resource: MessageBasedResource, definition: Mapping[str, Any]) -> None:
        device_name = definition["resources"][self.resource_name]["device"]
        device = definition["devices"][device_name]
        self._res = resource
        self._lock = threading.RLock()
        self._props = _props(device)
        self._answerable = _answerable(device)
        self._no_error = _no_error(device)
        self._errors: deque[tuple[int, str]] = deque()
        self._esr = 0

    @classmethod
    def open(cls, rm: pyvisa.ResourceManager, definition: Mapping[str, Any]) -> Self:
        resource = rm.open_resource(
            cls.resource_name, read_termination="\n", write_termination="\n"
        )
        if not isinstance(resource, MessageBasedResource):
            raise TypeError(f"expected a message-based resource, got {type(resource).__name__}")
        return cls(resource, definition)

    # --- public

    def handle_message(self, message: str) -> str | None:
        """Run one program message as the instrument would; the response line, or None."""
        with self._lock:
            try:
                classified = classify(message, self.profile, selected=self._selected())
            except ScpiError as exc:
                self.push_error(exc.code, exc.message)
                return None
            groups: list[list[str]] = []
            source = -1
            for unit in classified.units:
                answer = self._execute(unit.canonical, unit.query)
                if answer is None:
                    continue
                if unit.source != source or not groups:
                    groups.append([])
                    source = unit.source
                groups[-1].append(answer)
            # IEEE 488.2 §8.4.1: units of one source with ",", different sources with ";".
            return ";".join(",".join(g) for g in groups) if groups else None

    def execute(self, canonical: str, query: bool) -> str | None:
        """Run one canonical unit (no parsing); the answer of a query, if any."""
        with self._lock:
            return self._execute(canonical, query)

    def push_error(self, code: int, message: str) -> None:
        """Queue an error for ``SYST:ERR?``, as the instrument does for a refused message."""
        with self._lock:
            self._push(code, f'{code},"{message}"')

    def close(self) -> None:
        with self._lock:
            self._res.close()

    # --- one unit

    def _execute(self, canonical: str, query: bool) -> str | None:
        answer: str | None = None
        if query:
            answer = self._answer(canonical)
        else:
            self._send(canonical)
            self._after_write(canonical)
        self._drain()
        return answer

    def _answer(self, canonical: str) -> str | None:
        # Status reporting is merged here: refused messages never reach pyvisa-sim.
        if canonical == "SYST:ERR?":
            self._drain()
            return self._errors.popleft()[1] if self._errors else self._no_error
        if canonical == "*ESR?":
            value = int(self._ask("*ESR?")) | self._esr
            self._esr = 0
            return str(value)
        if canonical == "*STB?":
            ese = int(self._ask("*ESE?")) if "*ESE?" in self._answerable else 0
            return str((4 if self._errors else 0) | (32 if self._esr & ese else 0))
        self._before_query(canonical)
        if canonical in self._answerable:
            return self._ask(canonical)
        self._send(canonical)  # pyvisa-sim queues -113 and answers nothing, like a meter
        return None

    def _after_write(self, canonical: str) -> None:
        if canonical == "*CLS":
            self._errors.clear()
            self._esr = 0
            self._ask("*ESR?")  # reading pyvisa-sim's register clears it
        elif canonical == "*OPC":
            self._esr |= 1  # nothing is ever pending here
        elif canonical == "*RST":
            self._reset()
        self._link(canonical)

    def _reset(self) -> None:
        for prop in self._props.values():
            if prop.setter is not None and prop.name not in self.rst_keeps:
                self._send(prop.set_command(prop.parse(prop.default)))

    # --- hooks for the models

    def _selected(self) -> int | None:
        return None

    def _before_query(self, canonical: str) -> None:
        """Bring linked values up to date before pyvisa-sim answers ``canonical``."""

    def _link(self, canonical: str) -> None:
        """Bring linked values up to date after the write ``canonical``."""

    # --- plumbing

    def _send(self, command: str) -> None:
        self._res.write(command)

    def _ask(self, command: str) -> str:
        return self._res.query(command)

    def _get(self, name: str) -> int | float | str:
        prop = self._props[name]
        if prop.getter is None:
            raise ValueError(f"property {name!r} has no getter")
        return prop.parse(self._ask(prop.getter))

    def _set(self, name: str, value: int | float | str) -> None:
        self._send(self._props[name].set_command(value))

    def _drain(self) -> None:
        # Move pyvisa-sim's errors into ours at once, so SYST:ERR? keeps them in order.
        for _ in range(ERROR_QUEUE_DEPTH + 1):
            entry = self._ask("SYST:ERR?")
            if entry == self._no_error:
                return
            code = int(entry.split(",", 1)[0])
            self._push(code, entry)

    def _push(self, code: int, entry: str) -> None:
        if len(self._errors) >= ERROR_QUEUE_DEPTH:
            self._errors[-1] = _OVERFLOW
        else:
            self._errors.append((code, entry))
        self._esr |= _esr_bit(code)


class SimPsu(SimInstrument):
    """Keysight E36312A: three channels, each driving a resistive load (``SIM:LOAD``).

    While an output is on, the channel regulates to its voltage setpoint unless the load
    would draw more than the current limit (then it limits current). A measured voltage above
    the OVP level trips the channel: output off until ``VOLT:PROT:CLE`` and ``OUTP ON``.
    """

    profile = PSU_PROFILE
    resource_name = PSU_RESOURCE
    rst_keeps = frozenset({"ese", "sre", "saved_slot", "recalled_slot",
                           "ch1_load", "ch2_load", "ch3_load"})
    channels = (1, 2, 3)
    #: Fields *SAV stores and *RCL restores, per channel.
    saved_fields = ("voltage", "current", "ovp", "output")

    def __init__(self, resource: MessageBasedResource, definition: Mapping[str, Any]) -> None:
        super().__init__(resource, definition)
        # The memory of *SAV lives here: pyvisa-sim cannot copy one property to another.
        self._slots: dict[int, dict[str, int | float | str]] = {}

    def probe(self, channel: int) -> tuple[float, float]:
        """(measured volts, measured amps) at ``channel``'s terminals, for a DMM."""
        with self._lock:
            return (float(self._get(f"ch{channel}_measured_voltage")),
                    float(self._get(f"ch{channel}_measured_current")))

    def _selected(self) -> int:
        return int(self._ask("INST:NSEL?"))

    def _link(self, canonical: str) -> None:
        if m := _NSEL.fullmatch(canonical):
            self._set("selected_name", f"CH{m[1]}")
        elif m := _SEL.fullmatch(canonical):
            self._set("selected", int(m[1]))
        elif m := _CLEAR_TRIP.fullmatch(canonical):
            self._set(f"ch{m[1]}_ovp_tripped", 0)
        elif m := _SAV.fullmatch(canonical):
            self._slots[int(m[1])] = {name: self._get(name) for name in self._saved_names()}
        elif m := _RCL.fullmatch(canonical):
            saved = self._slots.get(int(m[1]))
            for name in self._saved_names():
                # A slot never saved holds the power-on defaults.
                prop = self._props[name]
                self._set(name, saved[name] if saved else prop.parse(prop.default))
        self._settle()

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
                on = False
            if on:
                load = float(self._get(p + "load"))
                limit = float(self._get(p + "current"))
                volts = min(float(self._get(p + "voltage")), limit * load)
                amps = volts / load
                if volts > float(self._get(p + "ovp")):
                    self._set(p + "ovp_tripped", 1)
                    self._set(p + "output", 0)
                    volts = amps = 0.0
            self._set(p + "measured_voltage", volts)
            self._set(p + "measured_current", amps)


class SimDmm(SimInstrument):
    """Keysight 34465A subset. With a probe, readings come from it (the bench wires PSU CH1)."""

    profile = DMM_PROFILE
    resource_name = DMM_RESOURCE
    #: What CONF? answers for each function, at the default range and resolution.
    conf_text: ClassVar[dict[str, str]] = {
        "VOLT": '"VOLT +1.00000000E+01,+3.00000000E-06"',
        "CURR": '"CURR +1.00000000E+00,+1.00000000E-06"',
    }
    _measures: ClassVar[dict[str, str]] = {"MEAS:VOLT:DC?": "VOLT", "MEAS:CURR:DC?": "CURR"}

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

    def _before_query(self, canonical: str) -> None:
        function = self._measures.get(canonical)
        if function is not None:
            # MEASure? is CONFigure then READ? (34465A manual, MEASure subsystem).
            self._send(f"CONF:{function}:DC")
            self._link(canonical)
        if function is not None or canonical == "READ?":
            self._refresh()

    def _link(self, canonical: str) -> None:
        self._set("conf", self.conf_text[str(self._get("function"))])

    def _refresh(self) -> None:
        if self._probe is not None:
            volts, amps = self._probe()
            self._set("measured_voltage", volts)
            self._set("measured_current", amps)
        name = "measured_voltage" if self._get("function") == "VOLT" else "measured_current"
        self._set("reading", float(self._get(name)))
