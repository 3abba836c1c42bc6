"""Fault injection between the gateway and an instrument, configured from tests.

    SimLink    an in-memory Link straight to a simulated instrument (no socket): fast, for
               the hypothesis state machine and the race tests
    FaultLink  wraps any Link (a PyvisaLink to the served simulator, or a SimLink) and fires
               armed faults on matching calls:

    Fault.READ_TIMEOUT     a query times out (after ``delay`` seconds holding the lane)
    Fault.WRITE_TIMEOUT    a write times out before it reaches the instrument
    Fault.WRITE_LANDED     a write reaches the instrument, then the call times out anyway
    Fault.DROP             the connection drops (closed); the next call reconnects
    Fault.GARBLED          a query's reply is garbage (in a compound query: the answer
                           to the unit that matches)
    Fault.EMPTY            a query's reply is empty (likewise)
    Fault.INSTRUMENT_ERROR the write lands and ``SYST:ERR?`` then reports an error
    Fault.WRONG_IDN        the connection drops and what answers after the reconnect is
                           another instrument (its ``*IDN?``), until disarmed

Use: ``link = FaultLink(PyvisaLink(config.instrument("psu")))``, pass
``links={"psu": link}`` to ``Gateway``, then ``link.arm(Fault.GARBLED, match="VOLT?")``.
Every fired fault is counted in ``link.fired``; every call in ``link.calls``.
"""

from __future__ import annotations

import enum
import threading
import time
from dataclasses import dataclass

from bench_gate.errors import InstrumentError
from bench_gate.instruments import Link
from sim_instruments import SimInstrument

__all__ = ["OTHER_IDN", "Fault", "FaultLink", "SimLink"]

#: What answers ``*IDN?`` when another instrument took the address.
OTHER_IDN = "RIGOL TECHNOLOGIES,DP832,DP8C000001,00.01.16"
GARBAGE = "\x7f#+3.\x1b0E@!"


def _replaced(command: str, answer: str, match: str, by: str) -> str:
    """``answer`` with the answer to the first unit of ``command`` matching ``match``
    replaced by ``by``: a compound query (IEEE 488.2 §8.4.1: one answer per unit, joined
    by ';', ``*IDN?`` last, its answer the rest) gets one bad answer, as an instrument
    would give it. Field queries hold no ';'; the gateway puts ``*IDN?`` last."""
    units = command.split(";")
    hit = next((i for i, u in enumerate(units) if match.upper() in u.upper()), None)
    if hit is None:
        return answer
    parts = answer.split(";", len(units) - 1)
    if len(parts) != len(units):
        return by if len(units) == 1 else answer
    parts[hit] = by
    return ";".join(parts)


class Fault(enum.Enum):
    READ_TIMEOUT = "read_timeout"
    WRITE_TIMEOUT = "write_timeout"
    WRITE_LANDED = "write_landed"
    DROP = "drop"
    GARBLED = "garbled"
    EMPTY = "empty"
    INSTRUMENT_ERROR = "instrument_error"
    WRONG_IDN = "wrong_idn"


_ON_WRITE = frozenset({Fault.WRITE_TIMEOUT, Fault.WRITE_LANDED, Fault.INSTRUMENT_ERROR})
_ON_QUERY = frozenset({Fault.READ_TIMEOUT, Fault.GARBLED, Fault.EMPTY})


class SimLink:
    """A Link straight to a simulated instrument's message handler: no socket, no thread."""

    def __init__(self, instrument: SimInstrument, name: str = "sim") -> None:
        self.instrument = instrument
        self.name = name
        #: An interface of its own (as a LAN connection is), so the gateway can lock it.
        self.session = instrument.open_session()

    def write(self, command: str) -> None:
        self.instrument.handle_message(command, self.session)

    def query(self, command: str, extra_seconds: float = 0.0) -> str:
        # In memory: answered at once, however long the instrument would take.
        answer = self.instrument.handle_message(command, self.session)
        if answer is None:
            raise InstrumentError(f"{self.name}: query {command!r} timed out: no answer")
        return answer.strip()

    def close(self) -> None:
        pass


@dataclass
class _Armed:
    fault: Fault
    match: str
    times: int
    delay: float


class FaultLink:
    """A Link that wraps another and injects armed faults (thread-safe: lanes call it from
    their worker thread while tests arm it from the event loop)."""

    def __init__(self, inner: Link, name: str = "psu") -> None:
        self.inner = inner
        self.name = name
        self.calls: list[str] = []
        self.fired: list[tuple[Fault, str]] = []
        self._armed: list[_Armed] = []
        self._lock = threading.Lock()
        self._impostor = False
        self._pending_error: str | None = None

    # ------------------------------------------------------------------ arming
    def arm(self, fault: Fault, *, match: str = "", times: int = 1, delay: float = 0.0
            ) -> None:
        """Fire ``fault`` on the next ``times`` calls whose command contains ``match``."""
        with self._lock:
            self._armed.append(_Armed(fault, match.upper(), times, delay))

    def impersonate(self) -> None:
        """From now on another instrument answers ``*IDN?`` (as if it took the address)."""
        self._impostor = True

    def disarm(self) -> None:
        with self._lock:
            self._armed.clear()
            self._impostor = False
            self._pending_error = None

    def _take(self, command: str, kinds: frozenset[Fault]) -> _Armed | None:
        with self._lock:
            for armed in self._armed:
                if armed.fault in kinds and armed.match in command.upper():
                    armed.times -= 1
                    if armed.times <= 0:
                        self._armed.remove(armed)
                    self.fired.append((armed.fault, command))
                    return armed
        return None

    def _drop(self, what: str) -> InstrumentError:
        self.inner.close()  # the next call reconnects
        return InstrumentError(f"{self.name}: {what} failed: connection reset by peer "
                               "(injected)")

    # ------------------------------------------------------------------ Link
    def write(self, command: str) -> None:
        self.calls.append(command)
        armed = self._take(command, _ON_WRITE | {Fault.DROP, Fault.WRONG_IDN})
        if armed is None:
            self.inner.write(command)
            return
        time.sleep(armed.delay)
        if armed.fault is Fault.WRITE_TIMEOUT:
            raise InstrumentError(f"{self.name}: write {command!r} timed out (injected)")
        if armed.fault is Fault.WRITE_LANDED:
            self.inner.write(command)
            raise InstrumentError(f"{self.name}: write {command!r} timed out (injected, "
                                  "after it reached the instrument)")
        if armed.fault is Fault.INSTRUMENT_ERROR:
            self.inner.write(command)
            self._pending_error = '-222,"Data out of range"'
            return
        if armed.fault is Fault.WRONG_IDN:
            self._impostor = True
        raise self._drop(f"write {command!r}")

    def query(self, command: str, extra_seconds: float = 0.0) -> str:
        self.calls.append(command)
        if command.upper().startswith("SYST:ERR") and self._pending_error is not None:
            error, self._pending_error = self._pending_error, None
            return error
        armed = self._take(command, _ON_QUERY | {Fault.DROP, Fault.WRONG_IDN})
        if armed is not None:
            time.sleep(armed.delay)
            if armed.fault is Fault.READ_TIMEOUT:
                self.inner.close()  # a late reply must not answer the next query
                raise InstrumentError(f"{self.name}: query {command!r} timed out (injected)")
            if armed.fault in (Fault.GARBLED, Fault.EMPTY):
                bad = GARBAGE if armed.fault is Fault.GARBLED else ""
                return _replaced(command, self._answer(command, extra_seconds),
                                 armed.match, bad)
            if armed.fault is Fault.WRONG_IDN:
                self._impostor = True
            raise self._drop(f"query {command!r}")
        return self._answer(command, extra_seconds)

    def _answer(self, command: str, extra_seconds: float) -> str:
        answer = self.inner.query(command, extra_seconds)
        if self._impostor:  # ``*IDN?`` alone, or last in a compound query
            return _replaced(command, answer, "*IDN?", OTHER_IDN)
        return answer

    def close(self) -> None:
        self.inner.close()
