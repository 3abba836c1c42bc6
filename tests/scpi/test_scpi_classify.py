"""Classification against the shipped profiles: canonical units, effects, channels, values."""

from __future__ import annotations

import itertools
import re
from decimal import Decimal

import pytest

from bench_gate.scpi import Effect, ScpiError, classify, format_number, get_profile, is_read_only

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
    (unit,) = classify("FOO #HFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF", "generic").units
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


# --- every spelling of every header ----------------------------------------------------------
#
# The spellings are generated here from the header patterns as written in the instrument
# manuals, independently of the profile compiler: short and long form of every node, every
# optional node present and absent, in upper, lower and the manual's mixed case.

_RE_NODE = re.compile(r"(\[)?:?([A-Za-z]+)\]?")


def _nodes(pattern: str) -> list[tuple[str, str, bool]]:
    out = []
    for part in re.findall(r"\[:?[A-Za-z]+:?\]|:?[A-Za-z]+", pattern):
        m = _RE_NODE.fullmatch(part.replace(":]", "]"))
        assert m, part
        word = m.group(2)
        short = "".join(c for c in word if c.isupper())
        out.append((short, word, m.group(1) is not None))
    return out


def spellings(pattern: str) -> list[str]:
    """Every legal spelling of a header pattern, each in three cases."""
    choices = []
    for short, word, optional in _nodes(pattern):
        opts: list[str | None] = [short, word] if short != word.upper() else [short]
        if optional:
            opts.append(None)
        choices.append(opts)
    out = []
    for i, combo in enumerate(itertools.product(*choices)):
        words = [w for w in combo if w is not None]
        if not words:
            continue
        header = ":".join(words)
        for j, case in enumerate((str, str.upper, str.lower)):
            out.append((":" if (i + j) % 4 == 0 else "") + case(header))
    return out


def misspellings(pattern: str) -> list[tuple[str, bool]]:
    """Headers one letter off the short or long form of one node: all undefined. With
    each, whether it cuts a node between its short and long form (``SYSTE``)."""
    nodes = _nodes(pattern)
    out = []
    for k, (short, word, _) in enumerate(nodes):
        bad = {word[: len(short) + 1].upper(), short[:-1], word.upper() + "X"}
        bad -= {short, word.upper(), ""}
        for b in sorted(bad):
            words = [b if i == k else s for i, (s, _, _) in enumerate(nodes)]
            out.append((":".join(words), len(short) < len(b) < len(word)
                        and word.upper().startswith(b)))
    return out


# (profile, pattern, '?' or '', parameters as sent, canonical units, effect, channel, value)
HEADERS: list[tuple[str, str, str, str, tuple[str, ...], Effect, int | None, object]] = [
    (PSU, "[SOURce:]VOLTage[:LEVel][:IMMediate][:AMPLitude]", "", " 5,(@1)",
     ("VOLT 5.0,(@1)",), Effect.SETPOINT, 1, Decimal(5)),
    (PSU, "[SOURce:]VOLTage[:LEVel][:IMMediate][:AMPLitude]", "?", " (@2)",
     ("VOLT? (@2)",), Effect.READ, 2, None),
    (PSU, "[SOURce:]VOLTage[:LEVel][:IMMediate][:AMPLitude]", "?", " MAX,(@3)",
     ("VOLT? MAX,(@3)",), Effect.READ, 3, None),
    (PSU, "[SOURce:]CURRent[:LEVel][:IMMediate][:AMPLitude]", "", " 100mA,(@1)",
     ("CURR 0.1,(@1)",), Effect.SETPOINT, 1, Decimal("0.1")),
    (PSU, "[SOURce:]CURRent[:LEVel][:IMMediate][:AMPLitude]", "?", " MIN,(@1)",
     ("CURR? MIN,(@1)",), Effect.READ, 1, None),
    (PSU, "OUTPut[:STATe]", "", " ON,(@1)", ("OUTP 1,(@1)",), Effect.OUTPUT, 1, True),
    (PSU, "OUTPut[:STATe]", "", " 0,(@2)", ("OUTP 0,(@2)",), Effect.OUTPUT, 2, False),
    (PSU, "OUTPut[:STATe]", "?", " (@3)", ("OUTP? (@3)",), Effect.READ, 3, None),
    (PSU, "[SOURce:]VOLTage:PROTection[:LEVel]", "", " 6.5,(@1)",
     ("VOLT:PROT 6.5,(@1)",), Effect.PROTECTION, 1, Decimal("6.5")),
    (PSU, "[SOURce:]VOLTage:PROTection[:LEVel]", "?", " (@1)",
     ("VOLT:PROT? (@1)",), Effect.READ, 1, None),
    (PSU, "[SOURce:]VOLTage:PROTection:CLEar", "", " (@2)",
     ("VOLT:PROT:CLE (@2)",), Effect.PROTECTION, 2, False),
    (PSU, "[SOURce:]VOLTage:PROTection:TRIPped", "?", " (@2)",
     ("VOLT:PROT:TRIP? (@2)",), Effect.READ, 2, None),
    (PSU, "MEASure[:SCALar]:VOLTage[:DC]", "?", " (@1)",
     ("MEAS:VOLT? (@1)",), Effect.READ, 1, None),
    (PSU, "MEASure[:SCALar]:CURRent[:DC]", "?", " (@3)",
     ("MEAS:CURR? (@3)",), Effect.READ, 3, None),
    (PSU, "INSTrument:NSELect", "", " 2", ("INST:NSEL 2",), Effect.SELECT, 2, None),
    (PSU, "INSTrument:NSELect", "?", "", ("INST:NSEL?",), Effect.READ, None, None),
    (PSU, "INSTrument[:SELect]", "", " P25V", ("INST:NSEL 2",), Effect.SELECT, 2, None),
    (PSU, "INSTrument[:SELect]", "?", "", ("INST:SEL?",), Effect.READ, None, None),
    (PSU, "APPLy", "", " CH1,5,0.1", ("VOLT 5.0,(@1)", "CURR 0.1,(@1)"),
     Effect.SETPOINT, 1, None),
    (PSU, "APPLy", "?", " CH2", ("VOLT? (@2)", "CURR? (@2)"), Effect.READ, 2, None),
    (PSU, "SYSTem:ERRor[:NEXT]", "?", "", ("SYST:ERR?",), Effect.READ, None, None),
    (PSU, "SYSTem:VERSion", "?", "", ("SYST:VERS?",), Effect.READ, None, None),
    (PSU, "CALibration:STATe", "?", "", ("CAL:STAT?",), Effect.READ, None, None),
    (PSU, "CALibration:SAVE", "", "", ("CAL:SAVE",), Effect.FORBIDDEN, None, None),
    (PSU, "CALibration:VOLTage[:DATA]", "", "", ("CAL:VOLT",), Effect.FORBIDDEN, None, None),
    (PSU, "SYSTem:SECurity:IMMediate", "", "", ("SYST:SEC:IMM",), Effect.FORBIDDEN, None, None),
    (DMM, "MEASure[:SCALar]:VOLTage[:DC]", "?", "", ("MEAS:VOLT:DC?",), Effect.MEASURE_CONFIG,
     None, None),
    (DMM, "MEASure[:SCALar]:CURRent[:DC]", "?", "", ("MEAS:CURR:DC?",), Effect.MEASURE_CONFIG,
     None, None),
    (DMM, "READ", "?", "", ("READ?",), Effect.READ, None, None),
    (DMM, "CONFigure", "?", "", ("CONF?",), Effect.READ, None, None),
    (DMM, "CONFigure[:SCALar]:VOLTage[:DC]", "", "", ("CONF:VOLT:DC",), Effect.MEASURE_CONFIG,
     None, None),
    (DMM, "CONFigure[:SCALar]:CURRent[:DC]", "", "", ("CONF:CURR:DC",), Effect.MEASURE_CONFIG,
     None, None),
    (DMM, "CONFigure[:SCALar]:RESistance", "", "", ("CONF:RES",), Effect.EXCITES, None, None),
    (DMM, "MEASure[:SCALar]:FRESistance", "?", "", ("MEAS:FRES?",), Effect.EXCITES, None, None),
    (DMM, "[SENSe:]VOLTage[:DC]:NPLC", "?", "", ("VOLT:NPLC?",), Effect.READ, None, None),
    (DMM, "FETCh", "?", "", ("FETC?",), Effect.READ, None, None),
    (DMM, "CALibration[:ALL]", "?", "", ("CAL?",), Effect.FORBIDDEN, None, None),
    (DMM, "SYSTem:ERRor[:NEXT]", "?", "", ("SYST:ERR?",), Effect.READ, None, None),
    ("generic", "SYSTem:ERRor[:NEXT]", "?", "", ("SYST:ERR?",), Effect.READ, None, None),
    ("generic", "SYSTem:VERSion", "?", "", ("SYST:VERS?",), Effect.READ, None, None),
]

SPELLED = [
    pytest.param(profile, spelling + query + params, canonical, effect, channel, value,
                 id=f"{profile}:{spelling}{query}{params}")
    for profile, pattern, query, params, canonical, effect, channel, value in HEADERS
    for spelling in spellings(pattern)
]


def test_the_spelling_table_is_large() -> None:
    assert len(SPELLED) > 1000


@pytest.mark.parametrize(
    ("profile", "message", "canonical", "effect", "channel", "value"), SPELLED
)
def test_every_spelling(
    profile: str, message: str, canonical: tuple[str, ...], effect: Effect,
    channel: int | None, value: object,
) -> None:
    result = classify(message, profile)
    assert result.canonical == canonical
    assert {u.effect for u in result.units} == {effect}
    assert {u.channel for u in result.units} == {channel}
    if len(result.units) == 1:
        assert result.units[0].value == value
    assert result.read_only is (effect is Effect.READ)
    assert is_read_only(message, profile=profile) is (effect is Effect.READ)


MISSPELLED = [
    pytest.param(profile, bad + query + params, between,
                 id=f"{profile}:{bad}{query}{params}")
    for profile, pattern, query, params, *_ in HEADERS
    for bad, between in misspellings(pattern)
]


@pytest.mark.parametrize(("profile", "message", "between"), MISSPELLED)
def test_misspelled_headers_are_refused_or_held(profile: str, message: str,
                                                between: bool) -> None:
    """On a complete profile a misspelling is a typo, refused at once (-113, or -112 for a
    too-long mnemonic); on any other it is unknown and held, except a node cut between
    its two forms (``SYSTE``), which a lenient parser may run as the header: refused."""
    if get_profile(profile).complete or between:
        with pytest.raises(ScpiError) as info:
            classify(message, profile)
        assert info.value.code in (-112, -113)
        assert not is_read_only(message, profile=profile)
        return
    try:
        result = classify(message, profile)
    except ScpiError as exc:  # a too-long mnemonic (-112), never anything else
        assert exc.code == -112
        return
    assert Effect.UNKNOWN in result.effects
    assert not result.read_only
    assert not is_read_only(message, profile=profile)


@pytest.mark.parametrize(
    "message", ["VOLTA 5", "VOLTAG 5,(@1)", "VOL 5,(@1)", "OUT ON,(@1)", "OUTPU ON,(@1)",
                "MEAS:VOLTA? (@1)", "MEASU:VOLT? (@1)", "SOURC:VOLT 5", "INST:NSE 2",
                "VOLT:AMPL:IMM 5,(@1)", "VOLT:LEV:LEV 5,(@1)", "OUTP:STAT:STAT ON",
                "STAT?", "*IDN", "*RST?", "*FOO", "*RST1", "SYST:ERR:NEXT:NEXT?"]
)
def test_unknown_headers(message: str) -> None:
    try:
        result = classify(message, PSU)
    except ScpiError as exc:  # a header form the profile does not have
        assert exc.code == -113
        return
    assert [u.effect for u in result.units] == [Effect.UNKNOWN]
    assert not is_read_only(message, profile=PSU)


# --- compound messages and relative headers --------------------------------------------------

E = Effect
# message -> [(canonical, effect, channel, value)], the selection after it
COMPOUND: list[tuple[str, list[tuple[str, Effect, int | None, object]], int | None]] = [
    ("OUTP:STAT? (@1);STAT ON,(@1)",
     [("OUTP? (@1)", E.READ, 1, None), ("OUTP 1,(@1)", E.OUTPUT, 1, True)], None),
    ("OUTP:STAT? (@1);:OUTP ON,(@1)",
     [("OUTP? (@1)", E.READ, 1, None), ("OUTP 1,(@1)", E.OUTPUT, 1, True)], None),
    ("SOUR:VOLT 5,(@1);CURR 0.1,(@1)",
     [("VOLT 5.0,(@1)", E.SETPOINT, 1, Decimal(5)),
      ("CURR 0.1,(@1)", E.SETPOINT, 1, Decimal("0.1"))], None),
    ("VOLT 5,(@1);CURR 0.1,(@1)",
     [("VOLT 5.0,(@1)", E.SETPOINT, 1, Decimal(5)),
      ("CURR 0.1,(@1)", E.SETPOINT, 1, Decimal("0.1"))], None),
    ("VOLT:PROT 6,(@1);LEV 5,(@1)",  # relative: VOLT:LEV
     [("VOLT:PROT 6.0,(@1)", E.PROTECTION, 1, Decimal(6)),
      ("VOLT 5.0,(@1)", E.SETPOINT, 1, Decimal(5))], None),
    ("VOLT:PROT:LEV? (@1);CLE (@1)",  # relative: VOLT:PROT:CLE
     [("VOLT:PROT? (@1)", E.READ, 1, None), ("VOLT:PROT:CLE (@1)", E.PROTECTION, 1, False)],
     None),
    ("MEAS:VOLT? (@1);CURR? (@1)",
     [("MEAS:VOLT? (@1)", E.READ, 1, None), ("MEAS:CURR? (@1)", E.READ, 1, None)], None),
    ("MEAS:VOLT? (@1);:CURR? (@1)",
     [("MEAS:VOLT? (@1)", E.READ, 1, None), ("CURR? (@1)", E.READ, 1, None)], None),
    ("SYST:ERR?;VERS?", [("SYST:ERR?", E.READ, None, None), ("SYST:VERS?", E.READ, None, None)],
     None),
    ("OUTP:STAT? (@1);*IDN?;STAT OFF,(@1)",  # common commands leave the path alone
     [("OUTP? (@1)", E.READ, 1, None), ("*IDN?", E.READ, None, None),
      ("OUTP 0,(@1)", E.OUTPUT, 1, False)], None),
    ("MEAS:VOLT? (@1) ;*RST",
     [("MEAS:VOLT? (@1)", E.READ, 1, None), ("*RST", E.STATE, None, None)], None),
    ("MEAS:VOLT? (@1);OUTP ON",  # relative: MEAS:OUTP, undefined
     [("MEAS:VOLT? (@1)", E.READ, 1, None), ("MEAS:OUTP ON", E.UNKNOWN, None, None)], None),
    ("MEAS:VOLT? (@1);:OUTP ON,(@1)",
     [("MEAS:VOLT? (@1)", E.READ, 1, None), ("OUTP 1,(@1)", E.OUTPUT, 1, True)], None),
    ("INST:NSEL 2;:MEAS:VOLT?",
     [("INST:NSEL 2", E.SELECT, 2, None), ("MEAS:VOLT? (@2)", E.READ, 2, None)], 2),
    ("INST:NSEL 2;MEAS:VOLT?",  # relative: INST:MEAS:VOLT, undefined
     [("INST:NSEL 2", E.SELECT, 2, None), ("INST:MEAS:VOLT?", E.UNKNOWN, None, None)], 2),
    ("INST CH3;:VOLT 5;:OUTP ON",
     [("INST:NSEL 3", E.SELECT, 3, None), ("VOLT 5.0,(@3)", E.SETPOINT, 3, Decimal(5)),
      ("OUTP 1,(@3)", E.OUTPUT, 3, True)], 3),
    ("INST:SEL N25V;:VOLT? MAX;:INST:NSEL 1;:VOLT?",
     [("INST:NSEL 3", E.SELECT, 3, None), ("VOLT? MAX,(@3)", E.READ, 3, None),
      ("INST:NSEL 1", E.SELECT, 1, None), ("VOLT? (@1)", E.READ, 1, None)], 1),
    ("APPL CH1,5,0.1;:OUTP ON,(@1)",
     [("VOLT 5.0,(@1)", E.SETPOINT, 1, Decimal(5)), ("CURR 0.1,(@1)", E.SETPOINT, 1,
      Decimal("0.1")), ("OUTP 1,(@1)", E.OUTPUT, 1, True)], None),
    ("APPL P6V,MAX,MAX", [("VOLT 6.0,(@1)", E.SETPOINT, 1, Decimal(6)),
                          ("CURR 5.0,(@1)", E.SETPOINT, 1, Decimal(5))], None),
    ("APPL CH2,MIN", [("VOLT 0.0,(@2)", E.SETPOINT, 2, Decimal(0))], None),
    ("VOLT 5,(@1,2)", [("VOLT 5.0,(@1)", E.SETPOINT, 1, Decimal(5)),
                       ("VOLT 5.0,(@2)", E.SETPOINT, 2, Decimal(5))], None),
    ("OUTP ON,(@1:3)", [("OUTP 1,(@1)", E.OUTPUT, 1, True), ("OUTP 1,(@2)", E.OUTPUT, 2, True),
                        ("OUTP 1,(@3)", E.OUTPUT, 3, True)], None),
    ("MEAS:VOLT? (@1:3)", [("MEAS:VOLT? (@1)", E.READ, 1, None),
                           ("MEAS:VOLT? (@2)", E.READ, 2, None),
                           ("MEAS:VOLT? (@3)", E.READ, 3, None)], None),
    # A ';' inside string or block data is refused (-151, -161: see ERRORS and
    # tests/scpi/test_scpi_separators.py); other characters in data stay data.
    ('FOO "x,OUTP ON",1', [('FOO "x,OUTP ON",1.0', E.UNKNOWN, None, None)], None),
    ('FOO "a""b:c"', [('FOO "a""b:c"', E.UNKNOWN, None, None)], None),
    ("FOO 'it''s *RST'", [('FOO "it\'s *RST"', E.UNKNOWN, None, None)], None),
    ("FOO #15a,b:c;*IDN?", [("FOO #15a,b:c", E.UNKNOWN, None, None),
                            ("*IDN?", E.READ, None, None)], None),
    ("*IDN?;:FOO #0a OUTP ON", [("*IDN?", E.READ, None, None),
                                ("FOO #19a OUTP ON", E.UNKNOWN, None, None)], None),
    ("*IDN?;*OPC?;*STB?;*ESR?;SYST:ERR?", [(c, E.READ, None, None) for c in (
        "*IDN?", "*OPC?", "*STB?", "*ESR?", "SYST:ERR?")], None),
    ("*CLS;*OPC;*WAI", [(c, E.HARMLESS, None, None) for c in ("*CLS", "*OPC", "*WAI")], None),
    ("*ESE 255;*SRE 0", [("*ESE 255", E.HARMLESS, None, None),
                         ("*SRE 0", E.HARMLESS, None, None)], None),
    ("*RST;*SAV 3;*RCL 3", [("*RST", E.STATE, None, None), ("*SAV 3", E.STATE, None, None),
                            ("*RCL 3", E.STATE, None, None)], None),
    ("*TST?", [("*TST?", E.STATE, None, None)], None),
    ("*CAL?", [("*CAL?", E.FORBIDDEN, None, None)], None),
    ("\tVOLT\t5\t,\t(@1)\t", [("VOLT 5.0,(@1)", E.SETPOINT, 1, Decimal(5))], None),
    ("*IDN? \r\n", [("*IDN?", E.READ, None, None)], None),
]


@pytest.mark.parametrize(("message", "units", "selected"), COMPOUND, ids=[c[0] for c in COMPOUND])
def test_compound_messages(
    message: str, units: list[tuple[str, Effect, int | None, object]], selected: int | None
) -> None:
    if any(e is E.UNKNOWN for _, e, _, _ in units):
        # The PSU's profile is complete: a message with a header it does not know is
        # refused whole (-113). The generic profile holds it, rendered as below.
        with pytest.raises(ScpiError) as info:
            classify(message, PSU)
        assert info.value.code == -113
        if not all(e is E.UNKNOWN or c.startswith("*") for c, e, _, _ in units):
            return
        result = classify(message, "generic")
    else:
        result = classify(message, PSU)
    assert [(u.canonical, u.effect, u.channel, u.value) for u in result.units] == units
    assert result.selected == selected
    reads = [e for _, e, _, _ in units]
    expected = all(e in (E.READ, E.SELECT) for e in reads) and reads[-1] is E.READ
    assert result.read_only is expected
    assert is_read_only(message, profile=result.profile) is expected


def test_units_remember_where_they_came_from() -> None:
    result = classify("*IDN?; APPL CH1,5,0.1", PSU)
    assert [(u.source, u.position, u.text) for u in result.units] == [
        (0, 0, "*IDN?"), (1, 7, "APPL CH1,5,0.1"), (1, 7, "APPL CH1,5,0.1")]


@pytest.mark.parametrize(
    ("message", "selected", "canonical"),
    [
        ("VOLT 5", 2, "VOLT 5.0,(@2)"),
        ("VOLT?", 3, "VOLT? (@3)"),
        ("OUTP ON", 1, "OUTP 1,(@1)"),
        ("MEAS:CURR?", 2, "MEAS:CURR? (@2)"),
        ("VOLT MAX", 1, "VOLT 6.0,(@1)"),
        ("VOLT MAX", 2, "VOLT 25.0,(@2)"),
        ("VOLT 5,(@3)", 1, "VOLT 5.0,(@3)"),  # an explicit list wins
    ],
)
def test_selection_forms_get_an_explicit_channel_list(
    message: str, selected: int, canonical: str
) -> None:
    (unit,) = classify(message, PSU, selected=selected).units
    assert unit.canonical == canonical


@pytest.mark.parametrize(
    ("message", "read_only"),
    [
        ("INST:NSEL 2;:MEAS:VOLT?", True),
        ("INST CH2;:MEAS:VOLT?;:MEAS:CURR?", True),
        ("INST:NSEL 2", False),  # a selection alone is held
        ("MEAS:VOLT? (@1);:INST:NSEL 2", False),
        ("INST:NSEL 2;:VOLT 5", False),
        ("INST:NSEL 2;*RST", False),
        ("*IDN?", True),
        ("*IDN?;*TST?", False),
        ("*IDN?;*CAL?", False),
        ("VOLT? (@1);:OUTP ON,(@1)", False),
        ("VOLT? (@1);:VOLT 1,(@1)", False),
        ("*IDN?;FOO?", False),
        ("*IDN?;*CLS", False),  # harmless, but not a read
    ],
)
def test_read_only(message: str, read_only: bool) -> None:
    assert is_read_only(message, profile=PSU) is read_only


@pytest.mark.parametrize(
    ("profile", "message", "read_only"),
    [
        # MEASure? reconfigures the meter: measure-config, passes, but it is no read.
        (DMM, "MEAS:VOLT?", False),
        (DMM, "MEAS:VOLT:DC?", False),
        (DMM, "MEASure:SCALar:VOLTage:DC?", False),
        (DMM, "READ?", True),
        (DMM, "CONF?", True),
        (DMM, "CONF:VOLT:DC", False),
        (DMM, "CONF:VOLT", False),
        (DMM, "CONF:VOLT;:READ?", False),
        (DMM, "*TST?", False),
        (DMM, "CAL?", False),
        (DMM, "FETC?", True),
        (DMM, "SENS:VOLT:DC:RANG?;:VOLT:DC:NPLC?;:TRIG:SOUR?;:SAMP:COUN?;:DATA:POIN?", True),
        ("generic", "*IDN?", True),
        ("generic", "*IDN?;*OPC?;*STB?;*ESR?;*ESE?;*SRE?", True),
        ("generic", "SYST:ERR?", True),
        ("generic", "SYSTem:ERRor:NEXT?", True),
        ("generic", "SYST:VERS?", True),
        ("generic", "MEAS:VOLT?", False),
        ("generic", "READ?", False),
        ("generic", "OUTP?", False),
        ("generic", "*RST", False),
        ("generic", "*TST?", False),
        ("generic", "*CAL?", False),
        ("generic", "*CLS", False),
        ("no-such-profile", "*IDN?", False),
    ],
)
def test_read_only_by_profile(profile: str, message: str, read_only: bool) -> None:
    assert is_read_only(message, profile=profile) is read_only


# --- parameters --------------------------------------------------------------------------------

PARAMETERS = [
    # numbers, exponents and suffixes with multipliers
    ("VOLT 5,(@1)", "VOLT 5.0,(@1)", Decimal(5)),
    ("VOLT 5.0,(@1)", "VOLT 5.0,(@1)", Decimal(5)),
    ("VOLT +5,(@1)", "VOLT 5.0,(@1)", Decimal(5)),
    ("VOLT .5,(@1)", "VOLT 0.5,(@1)", Decimal("0.5")),
    ("VOLT 5.,(@1)", "VOLT 5.0,(@1)", Decimal(5)),
    ("VOLT 5E0,(@1)", "VOLT 5.0,(@1)", Decimal(5)),
    ("VOLT 5e-1,(@1)", "VOLT 0.5,(@1)", Decimal("0.5")),
    ("VOLT 0.5E+1,(@1)", "VOLT 5.0,(@1)", Decimal(5)),
    ("VOLT 5 E 0,(@1)", "VOLT 5.0,(@1)", Decimal(5)),
    ("VOLT 1.5e-5,(@1)", "VOLT 0.000015,(@1)", Decimal("0.000015")),
    ("VOLT 0e999,(@1)", "VOLT 0.0,(@1)", Decimal(0)),
    ("VOLT #H5,(@1)", "VOLT 5.0,(@1)", Decimal(5)),
    ("VOLT #Q5,(@1)", "VOLT 5.0,(@1)", Decimal(5)),
    ("VOLT #B101,(@1)", "VOLT 5.0,(@1)", Decimal(5)),
    ("VOLT 5V,(@1)", "VOLT 5.0,(@1)", Decimal(5)),
    ("VOLT 5 V,(@1)", "VOLT 5.0,(@1)", Decimal(5)),
    ("VOLT 5v,(@1)", "VOLT 5.0,(@1)", Decimal(5)),
    ("VOLT 5000mV,(@1)", "VOLT 5.0,(@1)", Decimal(5)),
    ("VOLT 5000 mV,(@1)", "VOLT 5.0,(@1)", Decimal(5)),
    ("VOLT 5000mv,(@1)", "VOLT 5.0,(@1)", Decimal(5)),
    ("VOLT 5uV,(@1)", "VOLT 0.000005,(@1)", Decimal("0.000005")),
    ("VOLT 5UV,(@1)", "VOLT 0.000005,(@1)", Decimal("0.000005")),
    ("VOLT 5nV,(@1)", "VOLT 0.000000005,(@1)", Decimal("0.000000005")),
    ("VOLT 5pV,(@1)", "VOLT 0.000000000005,(@1)", Decimal("0.000000000005")),
    ("VOLT 0.005kV,(@1)", "VOLT 5.0,(@1)", Decimal(5)),
    ("VOLT 0.005KV,(@1)", "VOLT 5.0,(@1)", Decimal(5)),
    ("VOLT 5e-3kV,(@1)", "VOLT 5.0,(@1)", Decimal(5)),
    ("CURR 0.1A,(@1)", "CURR 0.1,(@1)", Decimal("0.1")),
    ("CURR 100mA,(@1)", "CURR 0.1,(@1)", Decimal("0.1")),
    ("CURR 100 ma,(@1)", "CURR 0.1,(@1)", Decimal("0.1")),
    ("CURR 100000uA,(@1)", "CURR 0.1,(@1)", Decimal("0.1")),
    ("VOLT:PROT 6600mV,(@1)", "VOLT:PROT 6.6,(@1)", Decimal("6.6")),
    # MIN|MAX|DEF, per channel
    ("VOLT MIN,(@1)", "VOLT 0.0,(@1)", Decimal(0)),
    ("VOLT MINimum,(@2)", "VOLT 0.0,(@2)", Decimal(0)),
    ("VOLT MAX,(@1)", "VOLT 6.0,(@1)", Decimal(6)),
    ("VOLT max,(@2)", "VOLT 25.0,(@2)", Decimal(25)),
    ("VOLT MAXIMUM,(@3)", "VOLT 25.0,(@3)", Decimal(25)),
    ("VOLT DEF,(@3)", "VOLT 0.0,(@3)", Decimal(0)),
    ("CURR DEFault,(@1)", "CURR 5.0,(@1)", Decimal(5)),  # CH1 resets to 5 A
    ("CURR DEFault,(@2)", "CURR 1.0,(@2)", Decimal(1)),
    ("CURR MAX,(@1)", "CURR 5.0,(@1)", Decimal(5)),
    ("CURR MAX,(@2)", "CURR 1.0,(@2)", Decimal(1)),
    ("VOLT:PROT MAX,(@2)", "VOLT:PROT 27.5,(@2)", Decimal("27.5")),
    # booleans: ON|OFF|1|0, numbers rounded, non-zero is ON
    ("OUTP ON,(@1)", "OUTP 1,(@1)", True),
    ("OUTP on,(@1)", "OUTP 1,(@1)", True),
    ("OUTP OFF,(@1)", "OUTP 0,(@1)", False),
    ("OUTP 1,(@1)", "OUTP 1,(@1)", True),
    ("OUTP 0,(@1)", "OUTP 0,(@1)", False),
    ("OUTP 2,(@1)", "OUTP 1,(@1)", True),
    ("OUTP -1,(@1)", "OUTP 1,(@1)", True),
    ("OUTP 1.0,(@1)", "OUTP 1,(@1)", True),
    ("OUTP 0.5,(@1)", "OUTP 1,(@1)", True),
    ("OUTP 0.49,(@1)", "OUTP 0,(@1)", False),
    ("OUTP -0.4,(@1)", "OUTP 0,(@1)", False),
    ("OUTP 1e-9,(@1)", "OUTP 0,(@1)", False),
    ("OUTP #H1,(@1)", "OUTP 1,(@1)", True),
    ("OUTP #B0,(@1)", "OUTP 0,(@1)", False),
    ("OUTP 1E1,(@1)", "OUTP 1,(@1)", True),
    # channel lists
    ("VOLT 5,( @ 1 )", "VOLT 5.0,(@1)", Decimal(5)),
]


@pytest.mark.parametrize(("message", "canonical", "value"), PARAMETERS,
                         ids=[p[0] for p in PARAMETERS])
def test_parameters(message: str, canonical: str, value: object) -> None:
    (unit,) = classify(message, PSU).units
    assert unit.canonical == canonical
    assert unit.value == value
    assert type(unit.value) is type(value)


@pytest.mark.parametrize(
    ("message", "canonical"),
    [
        ("*ESE 16", "*ESE 16"),
        ("*ESE 1.5", "*ESE 2"),
        ("*ESE #HFF", "*ESE 255"),
        ("*SAV 0", "*SAV 0"),
        ("*RCL 9", "*RCL 9"),
        ("INST:NSEL 2.4", "INST:NSEL 2"),
        ("INST:NSEL 1", "INST:NSEL 1"),
        ("INST ch1", "INST:NSEL 1"),
        ("INST:SEL P6V", "INST:NSEL 1"),
        ("INSTrument:SELect n25v", "INST:NSEL 3"),
    ],
)
def test_integer_and_channel_name_parameters(message: str, canonical: str) -> None:
    assert classify(message, PSU).canonical == (canonical,)


ERRORS = [
    # setpoints: no INF/NAN, ranges per channel
    ("VOLT INF,(@1)", -224), ("VOLT NINF,(@1)", -224), ("VOLT NAN,(@1)", -224),
    ("VOLT 9.9E37,(@1)", -222), ("VOLT ON,(@1)", -224), ("VOLT FOO,(@1)", -224),
    ("VOLT 7,(@1)", -222), ("VOLT 6.0001,(@1)", -222), ("VOLT -0.001,(@1)", -222),
    ("VOLT 26,(@2)", -222), ("CURR 1.1,(@2)", -222), ("CURR 5.1,(@1)", -222),
    ("VOLT:PROT 6.7,(@1)", -222), ("VOLT 6.1 V,(@1)", -222), ("VOLT 0.0061kV,(@1)", -222),
    ("VOLT 26,(@1,2)", -222), ("APPL CH1,7", -222), ("APPL CH2,5,2", -222),
    ('VOLT "5",(@1)', -104), ("VOLT #15abcde,(@1)", -104), ("VOLT (1+2),(@1)", -104),
    ("VOLT 1e101,(@1)", -123),
    # suffixes
    ("VOLT 5MV,(@1)", -131), ("VOLT 5Mv,(@1)", -131), ("CURR 100MA,(@1)", -131),
    ("CURR 100Ma,(@1)", -131), ("VOLT 5A,(@1)", -131), ("CURR 1V,(@1)", -131),
    ("VOLT 5 VV,(@1)", -131), ("VOLT 5XV,(@1)", -131), ("VOLT 5mA,(@1)", -131),
    ("VOLT 5 Ohm,(@1)", -131), ("*ESE 16V", -138), ("INST:NSEL 2V", -138),
    # booleans
    ("OUTP TRUE,(@1)", -104), ("OUTP 1V,(@1)", -104), ('OUTP "ON",(@1)', -104),
    ("OUTP ONN,(@1)", -104), ("OUTP (@1)", -109),
    # integers
    ("*ESE 256", -222), ("*ESE -1", -222), ("*SAV 10", -222), ("*SAV MAX", -104),
    ("INST:NSEL 4", -222), ("INST:NSEL 0", -222), ("INST:NSEL CH1", -104),
    ("INST CH4", -224), ("INST 2", -224), ("APPL CH9,1", -224), ("APPL 1,1", -224),
    # queries with MIN|MAX only
    ("VOLT? DEF,(@2)", -224), ("VOLT? 5,(@2)", -224),
    # channels
    ("VOLT 1,(@4)", -222), ("VOLT 1,(@0)", -222), ("VOLT 1,(@1,4)", -222),
    ("OUTP ON,(@1:4)", -222), ("MEAS:VOLT? (@9)", -222), ("VOLT 1,(@3:1)", -171),
    ("VOLT 1,(@)", -171), ("VOLT 1,(@1", -171), ("VOLT? (@1);:VOLT 1,(@2", -171),
    # parameter counts
    ("*IDN? 1", -108), ("*RST 1", -108), ("VOLT 1,2,(@1)", -108), ("OUTP ON,OFF,(@1)", -108),
    ("VOLT:PROT:CLE 1,(@1)", -108), ("*ESE", -109), ("VOLT", -109), ("INST:NSEL", -109),
    ("APPL", -109),
    # query-only and command-only headers
    ("MEAS:VOLT 5", -113), ("SYST:ERR", -113), ("*IDN", -113), ("*RST?", -113),
    ("VOLT:PROT:CLE?", -113), ("VOLT:PROT:TRIP", -113),
    # numeric suffixes on nodes that take none
    ("OUTP1 ON", -114), ("OUTP:STAT1 ON", -114), ("SOUR2:VOLT 5", -114), ("MEAS1:VOLT?", -114),
    # framing, injection attempts
    ("*IDN?\nOUTP ON", -102), ("*IDN?\r\nOUTP ON", -102), ("*IDN?\rOUTP ON", -102),
    ("*IDN?\x00;OUTP ON", -101), ("*IDN?\x00", -101), ("\x00", -101),
    ("MEAS:VOLT? (@1)\x1b;OUTP ON", -101), ("OUTP\u00a0ON", -101), ("*IDN?\u037eOUTP ON", -101),
    ("*IDN?\uff1bOUTP ON", -101), ("\u041eUTP ON,(@1)", -101), ("OUTP ON,(@\uff11)", -101),
    ("MEAS:VOLT? (1;OUTP ON)", -171), ("FOO (1;OUTP ON)", -171), ('FOO "a;b', -151),
    ('FOO "x;OUTP ON",1', -151), ('FOO "a""b;c"', -151), ("FOO 'it''s;*RST'", -151),
    ("FOO #15a;b;c;*IDN?", -161), ("*IDN?;:FOO #0a;OUTP ON", -161),
    ("*IDN?;", -102), ("", -102), (";OUTP ON", -102), ("*IDN? ;;OUTP ON", -102),
    ("*IDN?" + " " * 9000, -223), ("VOLT 1,(@1);" * 700, -223),
]


@pytest.mark.parametrize(("message", "code"), ERRORS, ids=[repr(e[0])[:60] for e in ERRORS])
def test_bad_input_raises_scpi_error_with_code(message: str, code: int) -> None:
    with pytest.raises(ScpiError) as info:
        classify(message, PSU)
    err = info.value
    assert err.code == code
    assert err.pos is not None
    assert err.message and str(code) in str(err)
    assert is_read_only(message, profile=PSU) is False


def test_caching_returns_the_same_classification() -> None:
    a = classify("VOLT 5,(@1)", PSU)
    assert classify("VOLT 5,(@1)", PSU) is a
    assert classify("VOLT 5,(@1)", PSU, selected=1) is not a


@pytest.mark.parametrize(
    ("message", "canonical"),
    [("CAL:STAT ON", "CAL:STAT"), ("CAL:VOLT 5", "CAL:VOLT"), ("CAL:SAVE", "CAL:SAVE"),
     ("SYST:SEC:IMM", "SYST:SEC:IMM"), ("*CAL?", "*CAL?"),
     ('CAL:SEC:STAT OFF,"pw"', "CAL:SEC:STAT")],
)
def test_forbidden_whatever_the_parameters(message: str, canonical: str) -> None:
    (unit,) = classify(message, PSU).units
    assert unit.effect is Effect.FORBIDDEN
    assert unit.header == canonical
    assert not is_read_only(message, profile=PSU)
