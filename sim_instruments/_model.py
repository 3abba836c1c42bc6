"""The simulated instruments.

pyvisa-sim holds every value. It matches strings exactly and has no linked properties, so
these classes canonicalize each message with ``bench_gate.scpi`` first, hand pyvisa-sim one
canonical unit at a time, and afterwards issue the sim-only ``SIM:`` setters of bench.yaml
that keep linked values in step (measurements follow setpoints, ``*RST`` restores defaults,
``VOLT:PROT:CLE`` clears a trip, ``CONF?`` follows ``CONF:...``).
"""

from __future__ import annotations

import itertools
import re
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import pyvisa
from pyvisa.resources import MessageBasedResource

from bench_gate.scpi import Effect, ScpiError, Unit, classify, get_profile, lex
from bench_gate.scpi._lexer import Block, CharData, Number, QuotedString

from ._resources import DMM_PROFILE, DMM_RESOURCE, PSU_PROFILE, PSU_RESOURCE
from ._settings import answer_limit, resolve_keywords

__all__ = ["ERROR_QUEUE_DEPTH", "PANEL", "Probe", "Session", "SimDmm", "SimInstrument", "SimPsu"]

#: Errors an instrument holds before the newest is replaced by -350 (SCPI-99 §21.8.1).
ERROR_QUEUE_DEPTH = 20
_OVERFLOW = (-350, '-350,"Queue overflow"')

#: A reading source for the DMM: (volts, amps).
Probe = Callable[[], tuple[float, float]]

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

_TYPES: dict[str, type[int] | type[float] | type[str]] = {"int": int, "float": float, "str": str}

#: Queries another interface may still send while one holds the lock: they change nothing.
_PASSIVE = frozenset({Effect.READ, Effect.SELECT, Effect.MEASURE_CONFIG, Effect.UNKNOWN})
#: SCPI-99 §21.8.9 -203: a legal command the instrument will not run (here: locked).
_LOCKED = -203
#: The SYSTem:LOCK subsystem, canonical (Keysight 34465A and E36300 programming guides).
_LOCK_COMMANDS = frozenset({"SYST:LOCK:REQ?", "SYST:LOCK:REL", "SYST:LOCK:OWN?",
                            "SYST:LOCK:NAME?"})


@dataclass(eq=False)
class Session:
    """One I/O interface talking to the instrument: a LAN connection (``LAN1``...), or the
    front panel, which the remote lock never covers. Interface-specific errors (a write
    refused by the lock) go to the session's own queue, as the Keysight guides describe
    SYSTem:ERRor? per I/O session; ``SYST:ERR?`` reads them first."""

    name: str
    panel: bool = False
    errors: deque[str] = field(default_factory=deque)


#: The person at the bench: in-process callers (``handle_message(msg)``) and ``SIM:PANEL``.
PANEL = Session("FRONT PANEL", panel=True)


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

    quoted: bool = False  # the getter answers string data: "VOLT"

    def parse(self, text: str) -> int | float | str:
        if self.quoted and len(text) >= 2 and text[0] == text[-1] == '"':
            text = text[1:-1]
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
        quoted = "getter" in spec and str(spec["getter"].get("r", "")).startswith('"')
        out[name] = _Prop(name, getter, setter, kind, spec.get("default", ""), quoted)
    return out


def _answerable(device: Mapping[str, Any]) -> frozenset[str]:
    """Every query pyvisa-sim answers; anything else would leave a read waiting. A dialogue
    ``"MMEM:UPL? *"`` answers that query whatever its parameters (the simulator's reading)."""
    out = {d["q"].strip() for d in device.get("dialogues", ()) if "r" in d}
    out |= {p["getter"]["q"].strip() for p in device.get("properties", {}).values()
            if "getter" in p}
    error = device.get("error", {})
    if isinstance(error, Mapping):
        for key in ("status_register", "error_queue"):
            out |= {entry["q"].strip() for entry in error.get(key, ())}
    return frozenset(out)


def _dialogue_queries(device: Mapping[str, Any]) -> frozenset[str]:
    return frozenset(d["q"].strip() for d in device.get("dialogues", ()))


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
    #: Whether the model has Keysight's SYSTem:LOCK subsystem (:meth:`_lock_unit`).
    lockable: ClassVar[bool] = False

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
        self._profile = get_profile(self.profile)
        #: Queries answered, and commands taken, whatever their parameters:
        #: "MMEM:UPL? *" -> "MMEM:UPL?", "MMEM:STOR:STAT *" -> "MMEM:STOR:STAT".
        self._any_params = {q[:-2]: q for q in _dialogue_queries(device) if q.endswith(" *")}
        #: The interface holding SYSTem:LOCK, and how many requests it nested.
        self._owner: Session | None = None
        self._lock_count = 0
        self._numbers = itertools.count(1)
        #: Seconds the last message keeps the instrument busy before it answers (a
        #: reading's integration); the LAN server waits that long.
        self.busy = 0.0
        #: IEEE 488.2 §10.7 macros (*DMC label -> its commands), run while *EMC 1 (§10.10).
        self.macros: dict[str, str] = {}
        self.macros_on = False

    @classmethod
    def open(cls, rm: pyvisa.ResourceManager, definition: Mapping[str, Any]) -> Self:
        resource = rm.open_resource(
            cls.resource_name, read_termination="\n", write_termination="\n"
        )
        if not isinstance(resource, MessageBasedResource):
            raise TypeError(f"expected a message-based resource, got {type(resource).__name__}")
        return cls(resource, definition)

    # --- public

    def open_session(self) -> Session:
        """A new remote interface (one per socket connection): ``LAN1``, ``LAN2``..."""
        return Session(f"LAN{next(self._numbers)}")

    def close_session(self, session: Session) -> None:
        """The interface went away: a lock it held is released, whatever its count."""
        with self._lock:
            if self._owner is session:
                self._owner, self._lock_count = None, 0

    @property
    def lock_owner(self) -> str | None:
        """The name of the interface holding the lock, or None."""
        return self._owner.name if self._owner is not None else None

    def handle_message(self, message: str, session: Session = PANEL) -> str | None:
        """Run one program message as the instrument would; the response line, or None.
        ``session`` is the interface it came in on (default: the front panel)."""
        with self._lock:
            self.busy = 0.0
            try:
                classified = classify(message, self.profile, selected=self._selected())
            except ScpiError as exc:
                self.push_error(exc.code, exc.message)
                return None
            groups: list[list[str]] = []
            source = -1
            for unit in classified.units:
                answer = self._unit(unit, session)
                if answer is None:
                    continue
                if unit.source != source or not groups:
                    groups.append([])
                    source = unit.source
                groups[-1].append(answer)
            # IEEE 488.2 §8.4.1: units of one source with ",", different sources with ";".
            return ";".join(",".join(g) for g in groups) if groups else None

    def _unit(self, unit: Unit, session: Session) -> str | None:
        """One unit from ``session``: a lock command, a unit the lock shuts out (its error
        queued on the session), or one for the instrument."""
        if self.lockable:
            if unit.canonical in _LOCK_COMMANDS:
                return self._lock_command(unit.canonical, session)
            if self._shut_out(unit, session):
                session.errors.append(f'{_LOCKED},"Command protected; the instrument is '
                                      f'locked by {self.lock_owner}"')
                return None
        if unit.canonical == "SYST:ERR?" and session.errors:
            return session.errors.popleft()
        if self._macro(unit):
            return None
        if self.macros_on and unit.header.lstrip(":") in self.macros:
            # §10.7.6: with macros enabled, a label is expanded, even one that is a header.
            return self.handle_message(self.macros[unit.header.lstrip(":")], session)
        return self.perform(unit.canonical, unit.query)

    def _macro(self, unit: Unit) -> bool:
        """*DMC "label",<block> defines a macro, *EMC 1|0 enables it, *PMC purges them
        (IEEE 488.2 §10.7, §10.10, §10.22); True if ``unit`` was one of them."""
        head = unit.canonical.split(" ", 1)[0]
        if head not in ("*DMC", "*EMC", "*PMC"):
            return False
        params = lex(unit.canonical)[0].params
        if head == "*DMC" and len(params) == 2 and isinstance(params[0], QuotedString) \
                and isinstance(params[1], Block | QuotedString):
            body = params[1].data if isinstance(params[1], Block) else params[1].text
            self.macros[params[0].text.upper().lstrip(":")] = body
        elif head == "*EMC" and params and isinstance(params[0], Number):
            self.macros_on = bool(params[0].value)
        elif head == "*PMC":
            self.macros.clear()
        return True

    def _shut_out(self, unit: Unit, session: Session) -> bool:
        """While another interface holds the lock, this one may query but not change
        anything; the front panel is never shut out (the simulator's reading)."""
        if session.panel or self._owner is None or self._owner is session:
            return False
        return not unit.query or unit.effect not in _PASSIVE

    def _lock_command(self, canonical: str, session: Session) -> str | None:
        """Keysight's SYSTem:LOCK subsystem (34465A guide, SYSTem:LOCK:NAME?/OWNer?/
        RELease/REQuest?): a request is granted (1) when no other interface holds the
        lock, and nests; each RELease undoes one request of the holder."""
        if canonical == "SYST:LOCK:REQ?":
            if session.panel or self._owner not in (None, session):
                return "0"
            self._owner = session
            self._lock_count += 1
            return "1"
        if canonical == "SYST:LOCK:REL":
            if self._owner is not None and self._owner is not session and not session.panel:
                session.errors.append(f'{_LOCKED},"Command protected; the instrument is '
                                      f'locked by {self.lock_owner}"')
            elif self._owner is session:
                self._lock_count -= 1
                if self._lock_count <= 0:
                    self._owner, self._lock_count = None, 0
            return None
        if canonical == "SYST:LOCK:OWN?":
            return f'"{self.lock_owner or "NONE"}"'
        return f'"{session.name}"'  # SYST:LOCK:NAME?

    def execute(self, canonical: str, query: bool) -> str | None:
        """Run one canonical unit (no parsing); the answer of a query, if any."""
        with self._lock:
            return self.perform(canonical, query)

    def push_error(self, code: int, message: str) -> None:
        """Queue an error for ``SYST:ERR?``, as the instrument does for a refused message."""
        with self._lock:
            self._push(code, f'{code},"{message}"')

    def close(self) -> None:
        with self._lock:
            self._res.close()

    # --- one unit

    def perform(self, canonical: str, query: bool) -> str | None:
        """One canonical unit, the lock held: what every interface's unit comes to (a test
        may wrap it on an instance to watch every unit, or to answer for the instrument)."""
        answer: str | None = None
        if query:
            answer = self._answer(canonical)
        else:
            if self._model_write(canonical):
                pass
            elif canonical.split(" ", 1)[0] in self._any_params:
                self._send(self._any_params[canonical.split(" ", 1)[0]])  # taken as it is
            else:
                self._send(resolve_keywords(self._profile, canonical))
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
        if canonical == "*LRN?":
            return self._learn()
        if canonical == "SYST:ERR:COUN?":
            self._drain()
            return f"+{len(self._errors)}"
        answer = self._model_answer(canonical)
        if answer is not None:
            return answer
        self._before_query(canonical)
        if canonical in self._answerable:
            return self._ask(canonical)
        limit = answer_limit(self._profile, canonical)  # VOLT:NPLC? MAX
        if limit is not None:
            return limit
        wildcard = self._any_params.get(canonical.split(" ", 1)[0])
        if wildcard is not None:
            return self._ask(wildcard)
        self._send(canonical)  # pyvisa-sim queues -113 and answers nothing, like a meter
        return None

    def _learn(self) -> str:
        """``*LRN?`` (IEEE 488.2 §10.17): the commands that set every setting as it is now."""
        parts = []
        for prop in self._props.values():
            if prop.setter is None or prop.getter is None or prop.setter.startswith("SIM:") \
                    or prop.name in self.rst_keeps:
                continue
            parts.append(prop.set_command(self._get(prop.name)))
        return ";".join(parts)

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
                self._send(prop.set_command(self._reset_value(prop.name)))

    def _reset_value(self, name: str) -> int | float | str:
        """What ``*RST`` leaves in property ``name``: the channel's own reset value where the
        profile gives one (``ChannelSpec.defaults``, what ``DEF`` renders: ``ch1_current``
        on a 6 V / 5 A output), else the property's power-on default."""
        prop = self._props[name]
        channel, _, field_name = name.partition("_")
        spec = self._profile.model.channels.get(int(channel[2:])) \
            if channel[:2] == "ch" and channel[2:].isdigit() else None
        if spec is not None and field_name in spec.defaults:
            return prop.parse(str(spec.defaults[field_name]))
        return prop.parse(prop.default)

    # --- hooks for the models

    def _selected(self) -> int | None:
        return None

    def _model_answer(self, canonical: str) -> str | None:
        """A query the model answers itself (a measurement), or None for pyvisa-sim."""
        return None

    def _model_write(self, canonical: str) -> bool:
        """A command the model carries out itself (CONFigure); False for pyvisa-sim."""
        return False

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
    the OVP level trips the channel, while its protection is on (``VOLT:PROT:STAT``, on after
    *RST): output off until ``VOLT:PROT:CLE`` and ``OUTP ON``.
    ``OUTP 0`` waits the channel's ``OUTP:DEL:FALL`` before the output goes off, as the
    Keysight supplies' turn-off sequencing does (N6700 guide, OUTPut:DELay:FALL: "affects
    on-to-off transitions including changes in the OUTPut:STATe").

    A trigger (``TRIG (@n)``, ``*TRG``) applies what the channel's mode says (E36300 guide,
    VOLTage:MODE; N6900 guide, LIST): STEP, the triggered levels (``VOLT:TRIG``,
    ``CURR:TRIG``); LIST, the list's points (_run_list). The arming (``INIT``) is not
    modelled. A triggered level never set answers 0 (unverified: the E3631A's answers the
    immediate level; the profile assumes neither, it reads the level and judges it).
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
        #: A list running per channel: the voltage of its present point, and its timer.
        self._list_level: dict[int, float] = {}
        self._list_timer: dict[int, threading.Timer] = {}

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
        if m := _NSEL.fullmatch(canonical):
            self._set("selected_name", f"CH{m[1]}")
        elif m := _SEL.fullmatch(canonical):
            self._set("selected", int(m[1]))
        elif m := _CLEAR_TRIP.fullmatch(canonical):
            self._set(f"ch{m[1]}_ovp_tripped", 0)
        elif canonical == "OUTP:TRAC 1" or (
                _VOLT.fullmatch(canonical) is not None and int(self._get("set_outp_trac"))):
            # E36300 guide, OUTPut:TRACk: CH3 follows CH2's voltage setpoint while on.
            self._set("ch3_voltage", float(self._get("ch2_voltage")))
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
                level = self._list_level.get(ch, float(self._get(p + "voltage")))
                volts = min(level, limit * load)
                amps = volts / load
                if volts > float(self._get(p + "ovp")) and self._get(p + "ovp_enabled"):
                    self._set(p + "ovp_tripped", 1)
                    self._set(p + "output", 0)
                    volts = amps = 0.0
            self._set(p + "measured_voltage", volts)
            self._set(p + "measured_current", amps)


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
