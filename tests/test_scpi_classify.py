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
