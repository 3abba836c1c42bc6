"""An answer made canonical is the same whether it was seen before or not: the kept
answers (a recheck and a read-back ask the same fields again and again) never change a
value, never keep a failure, and stay bounded."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench_gate.answers import ANSWERS_KEPT, normalize
from bench_gate.errors import InstrumentError
from bench_gate.scpi import get_profile

PROFILES = ["e36312a", "dp832", "spd3303x", "k2450"]

answers = st.one_of(
    st.sampled_from(["+1.00000000E+00", "1", "0", "ON", "OFF", "nan", "9.9E37", "", " 5 ",
                     "1,2,3", '"x"', "12", "0x10", "-0", "+5.0E+00\n", "MAYBE"]),
    st.text(max_size=12))


def _outcome(profile_name: str, fld: str, raw: str, channel: int | None) -> str:
    try:
        return normalize(get_profile(profile_name), fld, raw, "here", channel)
    except InstrumentError as exc:
        return f"error: {exc.message}"


@settings(max_examples=300, deadline=None)
@given(profile_name=st.sampled_from(PROFILES), data=st.data(), raw=answers,
       channel=st.sampled_from([None, 1, 2, 3]))
def test_seen_before_or_not_one_answer(profile_name: str, data: st.DataObject, raw: str,
                                       channel: int | None) -> None:
    fld = data.draw(st.sampled_from(sorted(get_profile(profile_name).fields)))
    first = _outcome(profile_name, fld, raw, channel)
    get_profile(profile_name).answers.clear()
    fresh = _outcome(profile_name, fld, raw, channel)
    again = _outcome(profile_name, fld, raw, channel)
    assert first == fresh == again


def test_a_failure_is_never_kept() -> None:
    profile = get_profile("e36312a")
    for _ in range(3):
        with pytest.raises(InstrumentError, match="is not a number"):
            normalize(profile, "voltage", "garbled", "psu: 'VOLT? (@1)'", 1)
    assert ("voltage", "garbled", 1) not in profile.answers


def test_kept_answers_stay_bounded() -> None:
    profile = get_profile("e36312a")
    for i in range(ANSWERS_KEPT + 10):
        assert normalize(profile, "voltage", f"{i}.5", channel=1) == f"{i}.5"
    assert len(profile.answers) <= ANSWERS_KEPT
