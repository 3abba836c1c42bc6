"""The short CI version of ``bench/fuzz_scpi.py``: the SCPI core under hostile input.

A few seconds of the same strategies and invariants as the long run (see docs/reliability.md
section 3): no crash but ScpiError, no non-read unit in a read-only message, and every
canonical unit re-classifies to itself. Plus the regressions the long run found.
"""

from __future__ import annotations

import pytest

from bench.fuzz_scpi import PROFILES, check_message, scpi_property
from bench_gate.scpi import ScpiError, classify


@pytest.mark.parametrize("part", range(3))
def test_fuzz_scpi_short(part: int) -> None:
    """1500 generated messages (near-valid, mutated and raw) in three parts of 500, every
    invariant. Each part draws afresh (no database, a random seed), so the three together
    are as many examples as one run of 1500, and the test workers can share them out."""
    scpi_property(500)()


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("text", [
    "MEAS:VOLT? (@1);:OUTP ON,(@1)",
    "INST:NSEL 2;:VOLT?",
    "INST:NSEL 2",
    "*IDN?;*CLS",
    "*ESE 5;*ESE?",
    "VOLT? (@1);VOLT 5",
    "SYST:ERR?;:GATE:TOK \"bg_x\"",
    "MEAS:VOLT? (@1);" * 511 + "*RST",
    "\x00*IDN?",
    "*IDN?\r\n",
    "#15abcde",
    "VOLT #0 5,(@1)",
    "APPL CH1,5,1;:APPL? CH1",
    "OUTP2 ON",
    "VOLT 5,(@1:3)",
])
def test_known_hostile_messages(profile: str, text: str) -> None:
    check_message(profile, text)
    for selected in (None, 1, 2, 3, 4):
        check_message(profile, text, selected)


def test_write_after_reads_is_never_read_only() -> None:
    c = classify("MEAS:VOLT? (@1);:VOLT 5,(@1)", "e36312a")
    assert not c.read_only


@pytest.mark.parametrize("text", [
    "GATE:TOK bg_{secret}",          # an unquoted token: character data too long (-144)
    "GATE:TOK:bg_{secret}",          # a token as a header node (-112)
    "bg_{secret}",                   # a token pasted on its own
    "VOLT 5bg_{secret},(@1)",        # a token as a unit suffix (-134)
])
def test_errors_never_echo_an_overlong_word(text: str) -> None:
    """Regression: the lexer's -112/-134/-144 errors echoed the whole word, so a token sent
    by mistake came back in SYST:ERR? (and an 8 KB word made an 8 KB error)."""
    secret = "Zq7" * 14
    with pytest.raises(ScpiError) as caught:
        classify(text.format(secret=secret), "e36312a")
    assert secret[:12] not in str(caught.value) and secret[:12] not in caught.value.message
    assert len(caught.value.message) < 200


def test_long_messages_do_not_fill_the_classification_cache() -> None:
    """Regression: every distinct message was cached (16384 entries), and an 8 KB message of
    500 units is about 110 KiB classified, so a client sending distinct long messages grew
    the gateway by up to ~1.8 GB. Long messages are now classified afresh: a cached result
    is returned as the same object, so a second classification that is a new object was
    neither kept nor looked up."""
    for i in range(0, 200, 7):
        message = ";:".join(["MEAS:VOLT? (@1)"] * 450) + " " * (i % 50) + ";*CAL?" * (i // 50)
        first = classify(message, "e36312a")
        assert len(first.units) >= 450
        assert classify(message, "e36312a") is not first, "a long message was cached"
    short = "MEAS:VOLT? (@2)"
    assert classify(short, "e36312a") is classify(short, "e36312a")  # short ones still cached
