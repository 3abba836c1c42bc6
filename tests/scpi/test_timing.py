"""A reading's timeout follows what the instrument was told (issue 18: READ? at NPLC 100
takes about 4 s on a 34465A; a fixed 2 s timeout failed it with -240 every time)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
    (["VOLT:NPLC 100", "VOLT:NPLC 1"], 0.401),  # each header keeps its last value, and
    (["VOLT:NPLC 1", "CURR:NPLC 100"], 4.001),  # the slowest function's counts: never short
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


def _ran(timing: Timing, *messages: str) -> None:
    for message in messages:
        for unit in classify(message, "34465a").units:
            timing.note(unit)


def test_a_recall_leaves_the_settings_unknown_until_a_reset() -> None:
    timing = Timing(get_profile("34465a"), cap=60)
    _ran(timing, "VOLT:NPLC 1", "*RCL 1")
    assert timing.unknown and timing.seconds(_unit("READ?")) == 60
    _ran(timing, "VOLT:NPLC 1", "SAMP:COUN 1")  # still not every setting the recall made
    assert timing.seconds(_unit("READ?")) == 60
    _ran(timing, "*RST")  # IEEE 488.2 §10.32: the known reset state
    assert not timing.unknown and timing.seconds(_unit("READ?")) == pytest.approx(0.401)
    # A slow header keeps its own time, whatever the settings.
    assert timing.seconds(_unit("*TST?")) == 30


@pytest.mark.parametrize(("messages", "refused"), [
    (["VOLT:NPLC 100;:SAMP:COUN 1000000"], True),
    (["SAMP:COUN 1000"], True),                    # 100 s at the fastest function's 0.1 s
    (["TRIG:COUN 2;:TRIG:DEL 3600"], True),
    (["VOLT:NPLC 100"], False),                    # 4 s
    (["SAMP:COUN 500"], False),                    # 50 s
    (["VOLT:NPLC 0.02;:CURR:NPLC 0.02;:RES:NPLC 0.02;:FRES:NPLC 0.02;:TEMP:NPLC 0.02;"
      ":VOLT:APER 0.001;:SAMP:COUN 10000"], False),  # a fast burst: 4 s at 0.4 ms
])
def test_a_configuration_beyond_the_cap_is_refused(messages: list[str], refused: bool) -> None:
    timing = Timing(get_profile("34465a"), cap=60)
    why = None
    for message in messages:
        why = timing.refusal(classify(message, "34465a").units)
    assert (why is not None) is refused
    if why is not None:
        assert "60 s limit" in why and "at least" in why


SETTINGS = st.sampled_from([
    "VOLT:NPLC {n}", "CURR:NPLC {n}", "RES:NPLC {n}", "VOLT:APER {a}", "SAMP:COUN {c}",
    "TRIG:COUN {c}", "TRIG:DEL {d}", "SAMP:TIM {d}", "*RCL 1", "*RST", "TRIG:COUN INF",
    "VOLT:NPLC MAX", "SAMP:COUN MAX", "TRIG:DEL MIN"])


@given(st.lists(st.tuples(SETTINGS, st.sampled_from(["0.02", "1", "10", "100"]),
                          st.sampled_from(["0.001", "0.1", "1"]),
                          st.sampled_from(["1", "10", "1000", "1000000"]),
                          st.sampled_from(["0", "0.5", "3600"])), max_size=8))
def test_no_reading_waits_past_the_cap(steps: list[tuple[str, str, str, str, str]]) -> None:
    """Whatever a client sets, in whatever order, a reading's extra time never passes the
    cap; and what the gateway lets through never makes every reading longer than it."""
    timing = Timing(get_profile("34465a"), cap=60)
    for form, n, a, c, d in steps:
        units = classify(form.format(n=n, a=a, c=c, d=d), "34465a").units
        if timing.refusal(units) is None:
            for unit in units:
                timing.note(unit)
        assert timing.reading(least=True) <= 60
        for reading in ("READ?", "FETC?", "MEAS:VOLT:DC?", "R?"):
            assert 0 <= timing.seconds(_unit(reading)) <= 60
