"""A value is shown to a person rounded to its field's resolution, from the profile: a
supply's volts in millivolts, an SMU's current in nanoamps (a 105 uA limit is not 0.000 A)."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from bench_gate.handoff import show_value
from bench_gate.scpi import available_profiles, get_profile

NUMBER_FIELDS = [(name, field) for name in available_profiles()
                 for field, spec in get_profile(name).fields.items()
                 if spec.type == "number" and not spec.flags]


def test_an_smu_limit_in_microamps_is_shown_as_such() -> None:
    assert show_value(get_profile("k2450"), "current", "0.000105") == "0.000105000 A"
    assert show_value(get_profile("e36312a"), "voltage", "+5.00000000E+00") == "5.000 V"
    assert show_value(get_profile("e36312a"), "voltage", "not a number") == "not a number"


@given(st.sampled_from(NUMBER_FIELDS),
       st.decimals(min_value=-1000, max_value=1000, allow_nan=False, places=12))
def test_a_number_is_shown_rounded_to_its_resolution(where: tuple[str, str],
                                                     value: Decimal) -> None:
    name, field = where
    spec = get_profile(name).fields[field]
    shown = show_value(get_profile(name), field, str(value))
    number, _, unit = shown.partition(" ")
    assert unit == spec.unit
    step = spec.resolution.normalize()
    assert Decimal(number).as_tuple().exponent == step.as_tuple().exponent
    assert abs(Decimal(number) - value) <= step / 2
