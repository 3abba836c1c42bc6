"""A reading's timeout follows what the instrument was told (issue 18: READ? at NPLC 100
takes about 4 s on a 34465A; a fixed 2 s timeout failed it with -240 every time)."""

from __future__ import annotations

import pytest

from bench_gate.scpi import Timing, classify, get_profile


def _unit(message: str, profile: str = "34465a"):  # type: ignore[no-untyped-def]
    (unit,) = classify(message, profile).units
    return unit


def test_defaults_come_from_the_profile() -> None:
    timing = Timing(get_profile("34465a"))
    # NPLC 10 at 50 Hz, autozero on: 0.4 s, and the 1 ms default trigger delay.
    assert timing.seconds(_unit("READ?")) == pytest.approx(0.401)
    assert timing.seconds(_unit("*IDN?")) == 0
    assert timing.seconds(_unit("VOLT:NPLC?")) == 0


@pytest.mark.parametrize(("settings", "seconds"), [
    (["VOLT:NPLC 100"], 4.001),
    (["CURR:NPLC MAX"], 4.001),             # MAX from the profile's range
    (["VOLT:NPLC 100", "VOLT:NPLC 1"], 4.001),  # the longest seen: never too short
    (["SAMP:COUN 5", "TRIG:COUN 2", "TRIG:DEL 0.5"], 2 * (0.5 + 5 * 0.4)),
    (["TRIG:COUN INF"], 0.401),             # each READ? still takes one trigger's worth
    (["SAMP:TIM 2"], 2.001),                # the sample timer, once set
    (["VOLT:APER 1"], 2.001),
])
def test_settings_that_lengthen_a_reading(settings: list[str], seconds: float) -> None:
    timing = Timing(get_profile("34465a"))
    for message in settings:
        for unit in classify(message, "34465a").units:
            timing.note(unit)
    for reading in ("READ?", "FETC?", "MEAS:VOLT:DC?", "MEAS:VOLT:DC? 10,0.001", "R?"):
        assert timing.seconds(_unit(reading)) == pytest.approx(seconds), reading


def test_a_slow_header_has_its_own_time() -> None:
    assert Timing(get_profile("34465a")).seconds(_unit("*TST?")) == 30
    assert Timing(get_profile("e36312a")).seconds(_unit("*TST?", "e36312a")) == 10
    assert Timing(get_profile("e36312a")).seconds(_unit("MEAS:VOLT? (@1)", "e36312a")) == 0
