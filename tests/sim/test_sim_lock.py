"""The simulated instruments' SYSTem:LOCK (Keysight's interface lock) and front panel, on
their own: in-process for the rule over every sequence of requests and releases, and over
real sockets for the connections (each one an interface) and the SIM:PANEL line."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_instruments import SimBench, SimBenchThread, SimInstrument

#: One step: which of two interfaces, and what it sends.
STEPS = st.lists(st.tuples(st.integers(0, 1),
                           st.sampled_from(["SYST:LOCK:REQ?", "SYST:LOCK:REL", "VOLT 1,(@1)",
                                            "VOLT? (@1)", "close"])), max_size=30)


@pytest.fixture(scope="module")
def psu() -> Iterator[SimInstrument]:
    bench = SimBench()
    yield bench.psu
    bench.psu.close()
    bench.dmm.close()


@settings(max_examples=60, deadline=None)
@given(steps=STEPS)
def test_the_lock_follows_the_manual_for_every_sequence(psu: SimInstrument,
                                                        steps: list[tuple[int, str]]) -> None:
    """Requests nest and each release undoes one; a request while another interface holds
    the lock answers 0; a write from a non-holder gets -203 and changes nothing; closing the
    holder's connection frees the lock."""
    sessions = [psu.open_session(), psu.open_session()]
    owner: int | None = None
    count = 0
    try:
        for who, command in steps:
            me = sessions[who]
            if command == "close":
                psu.close_session(me)
                if owner == who:
                    owner, count = None, 0
                sessions[who] = psu.open_session()
                continue
            before = psu.handle_message("VOLT? (@1)", me)
            answer = psu.handle_message(command, me)
            shut_out = owner is not None and owner != who
            if command == "SYST:LOCK:REQ?":
                assert answer == ("0" if shut_out else "1")
                if not shut_out:
                    owner, count = who, count + 1
            elif command == "SYST:LOCK:REL":
                if owner == who:
                    count -= 1
                    owner = owner if count else None
            if shut_out and "?" not in command:
                assert psu.handle_message("SYST:ERR?", me).startswith("-203,")
                assert psu.handle_message("VOLT? (@1)", me) == before
            expected = "NONE" if owner is None else sessions[owner].name
            assert psu.handle_message("SYST:LOCK:OWN?", me) == f'"{expected}"'
    finally:
        for s in sessions:
            psu.close_session(s)
        psu.handle_message("*RST;*CLS")


def _ask(f: Any, line: str) -> str:
    """Send a line on a socket file; a query's answer line."""
    f.write((line + "\n").encode())
    f.flush()
    return str(f.readline().decode().strip()) if "?" in line else ""


def test_connections_panel_and_release_on_close() -> None:
    with SimBenchThread() as bench:
        holder = socket.create_connection(("127.0.0.1", bench.psu_port), timeout=5)
        other = socket.create_connection(("127.0.0.1", bench.psu_port), timeout=5)
        panel = socket.create_connection(("127.0.0.1", bench.psu_port), timeout=5)
        h, o, p = (s.makefile("rwb") for s in (holder, other, panel))
        try:
            _ask(p, "SIM:PANEL")
            assert _ask(h, "SYST:LOCK:REQ?") == "1"
            name = _ask(h, "SYST:LOCK:NAME?")
            assert name.startswith('"LAN') and _ask(o, "SYST:LOCK:OWN?") == name
            assert _ask(o, "SYST:LOCK:REQ?") == "0"
            _ask(o, "OUTP ON,(@1)")
            assert _ask(o, "SYST:ERR?").startswith("-203,")
            assert _ask(h, "SYST:ERR?").startswith("+0"), "the holder's queue never sees it"
            _ask(p, "VOLT 2,(@1)")  # the front panel is never shut out...
            assert _ask(o, "VOLT? (@1)") == "+2.00000000E+00"
            assert _ask(p, "SYST:LOCK:REQ?") == "0"  # ...and never takes the lock
            _ask(p, "SYST:LOCK:REL")  # nor frees it
            assert _ask(o, "SYST:LOCK:OWN?") == name
            h.close()
            holder.close()
            deadline = time.monotonic() + 5
            while bench.psu.lock_owner is not None and time.monotonic() < deadline:
                time.sleep(0.02)
            assert _ask(o, "SYST:LOCK:OWN?") == '"NONE"', "the lock went with its connection"
            assert _ask(o, "SYST:LOCK:REQ?") == "1"
            _ask(o, "VOLT 3,(@1)")
            assert _ask(o, "VOLT? (@1)") == "+3.00000000E+00"
        finally:
            for f in (o, p):
                f.close()
            for s in (other, panel):
                s.close()


def test_the_meter_is_locked_the_same_way() -> None:
    with SimBenchThread() as bench:
        holder = socket.create_connection(("127.0.0.1", bench.dmm_port), timeout=5)
        other = socket.create_connection(("127.0.0.1", bench.dmm_port), timeout=5)
        h, o = holder.makefile("rwb"), other.makefile("rwb")
        try:
            assert _ask(h, "SYST:LOCK:REQ?") == "1"
            assert _ask(o, "MEAS:VOLT:DC?").startswith("+")  # a passive reading may pass
            assert _ask(o, "SYST:ERR?").startswith("+0")
            _ask(o, "CONF:RES")  # would source a test current: shut out
            assert _ask(o, "SYST:ERR?").startswith("-203,")
            assert _ask(o, "CONF?").startswith('"VOLT ')
        finally:
            for f in (h, o):
                f.close()
            for s in (holder, other):
                s.close()
