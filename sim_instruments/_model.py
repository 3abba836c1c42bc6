"""The simulated instruments' common model: :class:`SimInstrument`, which every simulator
derives from, and the I/O sessions it serves (:class:`Session`, the front panel).

pyvisa-sim holds every value. It matches strings exactly and has no linked properties, so
these classes canonicalize each message with ``bench_gate.scpi`` first, hand pyvisa-sim one
canonical unit at a time, and afterwards issue the sim-only ``SIM:`` setters of bench.yaml
that keep linked values in step (measurements follow setpoints, ``*RST`` restores defaults,
``VOLT:PROT:CLE`` clears a trip, ``CONF?`` follows ``CONF:...``). Each model's links live in
its own module: the default bench's E36312A in ``_psu.py`` and 34465A in ``_dmm.py``, the
instruments served one by one in ``_smu.py``, ``_dmm6500.py``, ``_e3631a.py``...
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import pyvisa
from pyvisa.resources import MessageBasedResource

from bench_gate.scpi import Classification, Effect, ScpiError, Unit, classify, get_profile, lex
from bench_gate.scpi._lexer import Block, Number, QuotedString

from ._definition import answerable, dialogue_queries, no_error, props
from ._settings import answer_limit, resolve_keywords

__all__ = ["ERROR_QUEUE_DEPTH", "PANEL", "Session", "SimInstrument"]

#: Longest message whose parse the simulator keeps: a gateway's joined recheck (about 600
#: characters, past the gateway's own cache) is parsed once, not at every recheck.
_CACHED_MESSAGE = 4096
_classify_long = functools.lru_cache(maxsize=256)(classify)


def _classify(message: str, profile: str, selected: int | None) -> Classification:
    if len(message) > _CACHED_MESSAGE:
        return classify(message, profile, selected=selected)
    return _classify_long(message, profile, selected=selected)


#: Errors an instrument holds before the newest is replaced by -350 (SCPI-99 §21.8.1).
ERROR_QUEUE_DEPTH = 20
_OVERFLOW = (-350, '-350,"Queue overflow"')

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
    #: Commands besides ``*CLS`` that empty the model's error queue.
    clears_errors: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, resource: MessageBasedResource, definition: Mapping[str, Any]) -> None:
        device_name = definition["resources"][self.resource_name]["device"]
        device = definition["devices"][device_name]
        self._res = resource
        self._lock = threading.RLock()
        self._props = props(device)
        self._answerable = answerable(device)
        self._no_error = no_error(device)
        self._errors: deque[tuple[int, str]] = deque()
        self._esr = 0
        self._plain = False  # the last query was answered from pyvisa-sim's table (perform)
        self._profile = get_profile(self.profile)
        #: Queries answered, and commands taken, whatever their parameters:
        #: "MMEM:UPL? *" -> "MMEM:UPL?", "MMEM:STOR:STAT *" -> "MMEM:STOR:STAT".
        self._any_params = {q[:-2]: q for q in dialogue_queries(device) if q.endswith(" *")}
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
                classified = _classify(message, self.profile, self._selected())
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
        self._plain = False
        if query:
            answer = self._answer(canonical)
            if self._plain:  # answered by pyvisa-sim from its table: no error to move
                return answer
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
            # A property's getter or a dialogue's answer queues no error in pyvisa-sim, so
            # perform() need not ask SYST:ERR? after it (half a query's cost).
            self._plain = True
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
        elif canonical in self.clears_errors:
            self._errors.clear()
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
