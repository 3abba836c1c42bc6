"""The IEEE 488.2 lexer on its own: message framing, units, and every kind of program data."""

from __future__ import annotations

import string
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench_gate.scpi import (
    MAX_MESSAGE_LENGTH,
    Block,
    ChannelList,
    CharData,
    Expression,
    Number,
    QuotedString,
    ScpiError,
    ScpiExecutionError,
    ScpiSyntaxError,
    classify,
    lex,
)

# --- framing: one message per call ----------------------------------------------------------


@pytest.mark.parametrize("terminator", ["", "\n", "\r\n"])
def test_one_trailing_terminator_is_stripped(terminator: str) -> None:
    (unit,) = lex("*IDN?" + terminator)
    assert unit.text == "*IDN?"
    assert unit.common and unit.query and unit.mnemonics == ("IDN",)


@pytest.mark.parametrize(
    ("message", "code", "pos"),
    [
        ("*IDN?\nOUTP ON", -102, 5),
        ("*IDN?\rOUTP ON", -102, 5),
        ("*IDN?\r\nOUTP ON", -102, 5),
        ("*IDN?\n\n", -102, 5),  # only one terminator is stripped
        ("*IDN?\r", -102, 5),  # a lone CR is not a terminator
        ("*IDN?\n\r\n", -102, 5),
        ("\n*IDN?", -102, 0),
        ("*IDN?\x00", -101, 5),
        ("*IDN?\x00;OUTP ON", -101, 5),
        ("\x00*IDN?", -101, 0),
        ("OUTP\x0bON", -101, 4),
        ("*IDN?\x1b[2J", -101, 5),
        ("*IDN?\x7f", -101, 5),
        ("*IDN?\x85", -101, 5),  # NEL, a unicode line break
        ("*IDN?\u2028OUTP ON", -101, 5),
        ("*IDN?\u037eOUTP ON", -101, 5),  # Greek question mark, looks like ';'
        ("*IDN?\uff1bOUTP ON", -101, 5),  # fullwidth semicolon
        ("\uff0aIDN?", -101, 0),  # fullwidth asterisk
        ("OUTP ON,(@\uff11)", -101, 10),  # fullwidth digit one
        ("\u041eUTP ON", -101, 0),  # Cyrillic capital O
        ("V\u041eLT 5", -101, 1),
        ("VOLT 5,(@1)\u200b", -101, 11),  # zero-width space
        ("VOLT\u00a05", -101, 4),  # no-break space
        ('SYST:TEXT "caf\u00e9"', -101, 14),
    ],
)
def test_line_breaks_control_bytes_and_non_ascii_are_refused(
    message: str, code: int, pos: int
) -> None:
    with pytest.raises(ScpiSyntaxError) as info:
        lex(message)
    assert (info.value.code, info.value.pos) == (code, pos)


def test_message_at_the_limit_is_read() -> None:
    message = "*IDN?" + " " * (MAX_MESSAGE_LENGTH - 5)
    assert len(lex(message)) == 1
    assert len(lex(message + "\r\n")) == 1  # the terminator does not count


@pytest.mark.parametrize("extra", [1, 2, 1000])
def test_over_long_message_is_refused_not_truncated(extra: int) -> None:
    message = "*IDN?" + " " * (MAX_MESSAGE_LENGTH - 5 + extra)
    with pytest.raises(ScpiExecutionError) as info:
        lex(message)
    assert info.value.code == -223
    assert str(MAX_MESSAGE_LENGTH) in info.value.detail


def test_over_long_message_of_many_units_is_refused() -> None:
    message = ";".join(["*IDN?"] * (MAX_MESSAGE_LENGTH // 6 + 1))
    assert len(message) > MAX_MESSAGE_LENGTH
    with pytest.raises(ScpiError) as info:
        lex(message)
    assert info.value.code == -223


# --- units and headers ---------------------------------------------------------------------


def test_units_split_at_semicolons_with_positions() -> None:
    units = lex("VOLT 5,(@1) ; :OUTP ON,(@1);*OPC?")
    assert [u.text for u in units] == ["VOLT 5,(@1)", ":OUTP ON,(@1)", "*OPC?"]
    assert [u.start for u in units] == [0, 14, 28]
    assert [u.absolute for u in units] == [False, True, False]
    assert [u.common for u in units] == [False, False, True]
    assert [u.index for u in units] == [0, 1, 2]


def test_header_mnemonics_are_upper_cased_with_suffixes_kept() -> None:
    (unit,) = lex(":sour2:Volt:LEVel? MAX")
    assert unit.mnemonics == ("SOUR2", "VOLT", "LEVEL")
    assert unit.absolute and unit.query
    assert unit.params == (CharData("MAX", 19),)


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("", -102),
        (" ", -102),
        (";", -102),
        (";*IDN?", -102),
        ("*IDN?;", -102),
        ("*IDN?; ", -102),
        ("*IDN?;;*IDN?", -102),
        (":", -102),
        ("::VOLT 5", -102),
        ("VOLT::LEV 5", -102),
        ("VOLT: 5", -102),
        (":*IDN?", -102),
        ("*", -102),
        ("*?", -102),
        ("1VOLT 5", -102),
        ("MEAS:VOLT?(@1)", -102),
        ("*IDN??", -102),
        ("*IDN?X", -102),
        ("VOLT-5", -102),
        ('"VOLT 5"', -102),
        ("VOLTAGEPROTEC 5", -112),
        ("ABCDEFGHIJKLM", -112),
        ("VOLT 5,", -109),
        ("VOLT 5, ", -109),
        ("VOLT 5,;*IDN?", -109),
        ("VOLT ,5", -101),
        ("VOLT 5,,(@1)", -101),
        ("OUTP ON (@1)", -103),
        ("MEAS:VOLT? (@1)(@2)", -103),
        ("VOLT 5 V V", -103),
        ("OUTP ON OFF", -103),
        ("FOO ABCDEFGHIJKLM", -144),
        ("FOO @", -101),
        ("FOO !", -101),
        ("FOO )", -101),
    ],
)
def test_malformed_units(message: str, code: int) -> None:
    with pytest.raises(ScpiSyntaxError) as info:
        lex(message)
    assert info.value.code == code


def test_numeric_suffix_does_not_count_towards_mnemonic_length() -> None:
    (unit,) = lex("ABCDEFGHIJKL12 5")
    assert unit.mnemonics == ("ABCDEFGHIJKL12",)


# --- program data --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "suffix"),
    [
        ("5", "5", ""),
        ("+5", "5", ""),
        ("-5", "-5", ""),
        ("5.", "5", ""),
        (".5", "0.5", ""),
        ("+.5", "0.5", ""),
        ("-0.25", "-0.25", ""),
        ("5E3", "5000", ""),
        ("5e3", "5000", ""),
        ("5e+3", "5000", ""),
        ("5E-3", "0.005", ""),
        ("5 E 3", "5000", ""),
        ("5\tE\t-3", "0.005", ""),
        ("1.5e-5", "0.000015", ""),
        ("0e999", "0", ""),
        ("1e100", "1e100", ""),
        ("1e-100", "1e-100", ""),
        ("5V", "5", "V"),
        ("5 V", "5", "V"),
        ("5000mV", "5000", "mV"),
        ("100 mA", "100", "mA"),
        ("5e-3kV", "0.005", "kV"),
        ("1e", "1", "e"),
        ("10 Ohm", "10", "Ohm"),
        ("1 m/s", "1", "m/s"),
        ("#HFF", "255", ""),
        ("#hff", "255", ""),
        ("#Q17", "15", ""),
        ("#q17", "15", ""),
        ("#B101", "5", ""),
        ("#b101", "5", ""),
    ],
)
def test_numbers(text: str, value: str, suffix: str) -> None:
    (unit,) = lex("FOO " + text)
    (datum,) = unit.params
    assert isinstance(datum, Number)
    assert datum.value == Decimal(value)
    assert datum.suffix == suffix
    assert datum.pos == 4


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("-", -121),
        ("+", -121),
        (".", -121),
        ("5.5.5", -121),
        ("5E3.2", -121),
        ("0x10", -121),
        ("5V(@1)", -121),
        ("5'", -121),
        ("1e101", -123),
        ("1e-101", -123),
        ("1" + "0" * 101, -123),
        ("0." + "0" * 100 + "1", -123),
        ("5 ABCDEFGHIJKLM", -134),
        ("#H", -121),
        ("#HG", -121),
        ("#Q8", -121),
        ("#B2", -121),
    ],
)
def test_bad_numbers(text: str, code: int) -> None:
    with pytest.raises(ScpiSyntaxError) as info:
        lex("FOO " + text)
    assert info.value.code == code


@pytest.mark.parametrize("digits", [84, 1000, 4000, 8000])
def test_huge_non_decimal_numbers_are_refused_like_huge_decimals(digits: int) -> None:
    # Regression: '#H' with thousands of digits was accepted, and an integer parameter's
    # range message then raised ValueError (int to str limit) instead of a ScpiError.
    with pytest.raises(ScpiSyntaxError) as info:
        lex("*SAV #H" + "F" * digits)
    assert info.value.code == -123


def test_largest_non_decimal_number_within_the_exponent_limit() -> None:
    (unit,) = lex("FOO #B1" + "0" * 332)  # 2**332 < 1e100
    (datum,) = unit.params
    assert isinstance(datum, Number) and datum.value == 2**332


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ON", "ON"),
        ("on", "ON"),
        ("Max", "MAX"),
        ("ch1", "CH1"),
        ("P25V", "P25V"),
        ("ABCDEFGHIJKL", "ABCDEFGHIJKL"),
        ("a_b", "A_B"),
    ],
)
def test_character_data_is_upper_cased(text: str, expected: str) -> None:
    (unit,) = lex("FOO " + text)
    assert unit.params == (CharData(expected, 4),)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"abc"', "abc"),
        ("'abc'", "abc"),
        ('""', ""),
        ('"a;b"', "a;b"),
        ('"a;OUTP ON"', "a;OUTP ON"),
        ("'a;b'", "a;b"),
        ('"a""b"', 'a"b'),
        ("'a''b'", "a'b"),
        ("'a\"b'", 'a"b'),
        ('"a\'b"', "a'b"),
        ('""""', '"'),
        ('"(@1)"', "(@1)"),
        ('"#15abcde"', "#15abcde"),
    ],
)
def test_quoted_strings(text: str, expected: str) -> None:
    (unit,) = lex("FOO " + text)
    assert unit.params == (QuotedString(expected, 4),)


@pytest.mark.parametrize("text", ['"abc', "'abc", '"a""', "'a;b", '"a\'', '"'])
def test_unclosed_strings(text: str) -> None:
    with pytest.raises(ScpiSyntaxError) as info:
        lex("FOO " + text)
    assert info.value.code == -151


def test_semicolon_inside_a_string_does_not_split() -> None:
    units = lex('FOO "x;OUTP ON";*IDN?')
    assert [u.text for u in units] == ['FOO "x;OUTP ON"', "*IDN?"]


@pytest.mark.parametrize(
    ("text", "channels"),
    [
        ("(@1)", (1,)),
        ("(@1,2)", (1, 2)),
        ("(@1:3)", (1, 2, 3)),
        ("(@1,3:4)", (1, 3, 4)),
        ("( @ 1 , 2 )", (1, 2)),
        ("(@1 : 3)", (1, 2, 3)),
        ("(@2,2)", (2, 2)),
        ("(@0)", (0,)),
        ("(@1:65)", tuple(range(1, 66))),
    ],
)
def test_channel_lists(text: str, channels: tuple[int, ...]) -> None:
    (unit,) = lex("FOO " + text)
    assert unit.params == (ChannelList(channels, 4),)


@pytest.mark.parametrize(
    "text", ["(@)", "(@1,)", "(@,1)", "(@a)", "(@1:)", "(@3:1)", "(@1:66)", "(@1", "(@12345)",
             "(@1-3)", "(@(1))"]
)
def test_bad_channel_lists(text: str) -> None:
    with pytest.raises(ScpiSyntaxError) as info:
        lex("FOO " + text)
    assert info.value.code == -171


def test_expression_other_than_a_channel_list() -> None:
    (unit,) = lex("FOO (1+2)")
    assert unit.params == (Expression("1+2", 4),)


@pytest.mark.parametrize(
    "text", ["(1;OUTP ON)", "(@1;OUTP ON)", '("a)', "('a)", "(x;*RST)", "(;)"]
)
def test_expression_cannot_hide_a_separator_or_a_quote(text: str) -> None:
    # Regression: '(1;OUTP ON)' was one expression, so 'FOO (1;OUTP ON)' became a single
    # held unknown unit whose canonical text an instrument would split, running OUTP ON.
    # IEEE 488.2 §7.7.7.2 excludes ';' and quotes from expression data.
    with pytest.raises(ScpiSyntaxError) as info:
        lex("FOO " + text)
    assert info.value.code == -171


@pytest.mark.parametrize(
    ("text", "data"),
    [
        ("#15abcde", "abcde"),
        ("#15a;b;c", "a;b;c"),
        ("#3005a;b;c", "a;b;c"),
        ("#10", ""),
        ('#13"a;', '"a;'),
        ("#0abc", "abc"),
        ("#0a;b;OUTP ON", "a;b;OUTP ON"),  # indefinite: to the end of the message
        ("#0", ""),
    ],
)
def test_blocks(text: str, data: str) -> None:
    (unit,) = lex("FOO " + text)
    assert unit.params == (Block(data, 4),)


def test_definite_block_is_followed_by_more_units() -> None:
    units = lex("FOO #15a;b;c;*IDN?")
    assert [u.text for u in units] == ["FOO #15a;b;c", "*IDN?"]


@pytest.mark.parametrize("text", ["#", "#15ab", "#9", "#1", "#2x", "#Z1", "#3005ab"])
def test_bad_blocks(text: str) -> None:
    with pytest.raises(ScpiSyntaxError) as info:
        lex("FOO " + text)
    assert info.value.code == -161


def test_error_carries_code_name_message_source_and_position() -> None:
    with pytest.raises(ScpiSyntaxError) as info:
        lex("VOLT 5,,(@1)")
    err = info.value
    assert err.code == -101
    assert err.name == "Invalid character"
    assert err.source == "VOLT 5,,(@1)"
    assert err.pos == 7
    assert "at column 8" in err.message
    assert str(err).startswith('-101,"Invalid character; ')


@settings(max_examples=200, deadline=None)
@given(secret=st.text(alphabet=string.ascii_letters + string.digits + "_-", min_size=16,
                      max_size=43),
       where=st.sampled_from(["VOLT {}", "{}", "VOLT 1,{}", "OUTP {};*IDN?", "VOLT:{} 1",
                              "*IDN? {}", "VOLT ab{}", "{}?"]))
def test_an_error_never_shows_a_character_of_a_pasted_token(secret: str, where: str) -> None:
    """A token pasted where a word goes: an error quoted up to 12 characters of a word (or
    the word up to a '-'), too few for the journal's redaction to know a token by, and
    those were its first secret characters ('bg_M4DMstreY'...). Now none is shown."""
    message = where.format("bg_" + secret)
    try:
        classify(message, "e36312a")
    except ScpiError as exc:
        text = str(exc)
        assert "bg_" + secret[:1] not in text and "BG_" + secret[:1].upper() not in text, text
