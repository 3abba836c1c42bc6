"""Classification against the shipped profiles: canonical units, effects, channels, values."""

from __future__ import annotations

from decimal import Decimal

import pytest

from bench_gate.scpi import Effect, ScpiError, classify, format_number, is_read_only

PSU = "e36312a"
DMM = "34465a"


# --- regressions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("123456789012345678901234567890", "123456789012345678901234567890.0"),
        ("340282366920938463463374607431768211455", "340282366920938463463374607431768211455.0"),
        ("1.00000000000000000000000000000001", "1.00000000000000000000000000000001"),
        ("5", "5.0"),
        ("5.000", "5.0"),
        ("1E+2", "100.0"),
        ("0.000015", "0.000015"),
        ("-0.5", "-0.5"),
        ("0E+5", "0.0"),
    ],
)
def test_format_number_is_exact(value: str, text: str) -> None:
    # Regression: format_number normalised in the default 28-digit context, so a held
    # unknown unit 'FOO 123456789012345678901234567890' was rendered (and would have been
    # sent) as 'FOO 123456789012345678901234567900.0'.
    assert format_number(Decimal(value)) == text


def test_unknown_unit_keeps_every_digit() -> None:
    (unit,) = classify("FOO #HFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF", PSU).units
    assert unit.canonical == "FOO 340282366920938463463374607431768211455.0"
    assert unit.effect is Effect.UNKNOWN


@pytest.mark.parametrize("message", ["VOLT:PROT DEF,(@1)", "VOLT:PROT DEFault,(@2)"])
def test_def_without_a_profile_default_is_refused(message: str) -> None:
    # Regression: DEF for a field without a default fell through to MIN, so
    # 'VOLT:PROT DEF,(@1)' was rendered 'VOLT:PROT 0.0,(@1)' (an over-voltage trip level of 0 V).
    with pytest.raises(ScpiError) as info:
        classify(message, PSU)
    assert info.value.code == -224


@pytest.mark.parametrize(
    ("message", "canonical"),
    [
        ("VOLT DEF,(@1)", "VOLT 0.0,(@1)"),
        ("CURR DEF,(@2)", "CURR 1.0,(@2)"),
        ("APPL CH1,DEF,DEF", "VOLT 0.0,(@1)"),
    ],
)
def test_def_with_a_profile_default(message: str, canonical: str) -> None:
    assert classify(message, PSU).units[0].canonical == canonical


@pytest.mark.parametrize("message", ["APPL CH1", "APPLy P25V", "APPL CH1;*IDN?", "*IDN?;APPL CH3"])
def test_expansion_to_nothing_is_refused(message: str) -> None:
    # Regression: 'APPL CH1' expanded to no unit at all, so it vanished from the
    # classification and 'APPL CH1;*IDN?' was read-only.
    with pytest.raises(ScpiError) as info:
        classify(message, PSU)
    assert info.value.code == -109
    assert not is_read_only(message, profile=PSU)


@pytest.mark.parametrize("selected", [0, 4, 99, -1])
def test_a_selection_that_does_not_exist_is_refused(selected: int) -> None:
    # Regression: an unknown selected channel was used as is, with no range at all:
    # 'VOLT 1000' with selected=4 rendered 'VOLT 1000.0,(@4)'.
    with pytest.raises(ScpiError) as info:
        classify("VOLT 1000", PSU, selected=selected)
    assert info.value.code == -222
    assert not is_read_only("VOLT?", profile=PSU, selected=selected)


def test_a_selection_that_exists_is_used() -> None:
    (unit,) = classify("VOLT 5", PSU, selected=2).units
    assert (unit.canonical, unit.channel) == ("VOLT 5.0,(@2)", 2)
    assert classify("*IDN?", PSU, selected=7).units[0].canonical == "*IDN?"  # not used


@pytest.mark.parametrize("message", [b"*IDN?", None, 5, ["*IDN?"], bytearray(b"*IDN?")])
def test_is_read_only_never_raises_on_a_non_string(message: object) -> None:
    # Regression: bytes raised TypeError from the lexer (and a list from the cache).
    assert is_read_only(message, profile=PSU) is False  # type: ignore[arg-type]
