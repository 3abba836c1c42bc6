"""No separator hidden in data: only canonical SCPI that means one unit to any parser is sent.

Security finding: ``DISP:TEXT "a;VOLT 20.0,(@2);OUTP 1,(@2);X"`` (an unknown header, held and
approved as a harmless-looking state change) was re-rendered with its string intact, and
pyvisa-sim, like many firmwares and home-made parsers, splits every message at ';': CH2 went
to 20 V with its output on. An indefinite block (``#0x;CURR 4.5,(@1);OUTP 1,(@1)``) did the
same. So a ';' inside string data (IEEE 488.2 §7.7.5) is refused with -151, inside block
data (§7.7.6) with -161, for every header, known or not, unless the profile opts that one
header form in (``separators_in_data: true``). CR, LF and NUL are refused message-wide.

This file also pins the IEEE 488.2 status commands: ``*OPC``, ``*WAI``, ``*ESE n`` and
``*SRE n`` are harmless and pass unattended; ``*CLS`` is ``local`` (answered by the gateway,
never sent), on every shipped profile.
"""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench_gate.config import PolicyConfig
from bench_gate.policy import approval_for
from bench_gate.scpi import (
    Effect,
    ProfileError,
    ScpiError,
    available_profiles,
    classify,
    get_profile,
    is_read_only,
    lex,
    units,  # the renderers, patched to test the final guard
)

PSU = "e36312a"
SHIPPED = available_profiles()
ATTACK_STRING = 'DISP:TEXT "a;VOLT 20.0,(@2);OUTP 1,(@2);X"'
ATTACK_BLOCK = "DISP:TEXT #0x;CURR 4.5,(@1);OUTP 1,(@1)"

OPT_IN_PROFILE = """\
name: optin
title: A test instrument that parses string and block data itself
channels:
  1: {names: [CH1]}
commands:
  - header: "*IDN"
    query: {effect: read}
  - header: "DISPlay[:WINDow]:TEXT[:DATA]"
    set: {effect: state, params: [{name: text, type: string}], separators_in_data: true}
  - header: "DISPlay[:WINDow]:TEXT:LABel"
    set: {effect: state, params: [{name: text, type: string}]}
  - header: "DATA:BLOCk"
    set: {effect: state, params: [{name: data, type: block}], separators_in_data: true}
  - header: "DATA:NOTE"
    set: {effect: state, params: [{name: note, type: string, optional: true}],
          expand: ["DISP:TEXT {note}"]}
"""


@pytest.fixture(scope="module")
def optin(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("profiles") / "optin.yaml"
    path.write_text(OPT_IN_PROFILE, encoding="utf-8")
    return str(path)


def refused(message: str, profile: str = PSU) -> ScpiError:
    with pytest.raises(ScpiError) as info:
        classify(message, profile)
    assert is_read_only(message, profile=profile) is False
    return info.value


def naive_pieces(canonical: str) -> list[str]:
    """What a parser that knows neither strings nor blocks makes of one canonical text."""
    return canonical.replace("\r", "\n").replace("\n", ";").split(";")


# --- the finding ---------------------------------------------------------------------------


@pytest.mark.parametrize("profile", SHIPPED)
def test_the_string_attack_is_refused_with_151(profile: str) -> None:
    err = refused(ATTACK_STRING, profile)
    assert err.code == -151
    assert err.name == "Invalid string data"
    assert "a ';' inside string data would split the message on many instruments" in err.detail
    assert err.pos == ATTACK_STRING.index(";")


@pytest.mark.parametrize("profile", SHIPPED)
def test_the_indefinite_block_attack_is_refused_with_161(profile: str) -> None:
    err = refused(ATTACK_BLOCK, profile)
    assert err.code == -161
    assert err.name == "Invalid block data"
    assert "indefinite block data (#0) runs to the end of the message" in err.detail
    assert "would split the message" in err.detail
    assert err.pos == ATTACK_BLOCK.index(";")


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("DISP:TEXT 'a;b'", -151),  # single-quoted
        ('DISP:TEXT "a;b"', -151),
        ('DISP:TEXT ";"', -151),
        ('DISP:TEXT "a"";OUTP ON"', -151),  # behind a doubled quote
        ("DISP:TEXT 'it''s;*RST'", -151),
        ('DISP:TEXT ";:OUTP ON,(@1)"', -151),
        ('*IDN?;:DISP:TEXT "x;*RST";:MEAS:VOLT? (@1)', -151),
        ('DISP:TEXT 1,"ok","a;b"', -151),  # not only the first parameter
        ('DISP:TEXT? "a;b"', -151),  # a query too
        ("DISP:TEXT #14a;bc", -161),  # definite block
        ("DISP:TEXT #14a;bc;*IDN?", -161),
        ("DISP:TEXT #3004;;;;", -161),
        ("DISP:TEXT #0;", -161),
        ("DISP:TEXT #0x;*RST", -161),
        ('CAL:SEC:STAT OFF,"p;w"', -151),  # a forbidden header: still refused, never rendered
        ('VOLT "5;OUTP 1",(@1)', -151),  # a known header that takes no string
        ("VOLT #13a;b,(@1)", -161),
    ],
)
def test_a_separator_inside_data_is_refused_on_every_header(message: str, code: int) -> None:
    err = refused(message)
    assert err.code == code
    assert err.pos is not None and message[err.pos] == ";"


def test_the_lexer_still_reads_the_string_so_the_door_can_report_it() -> None:
    # The lexer is grammar only (GATE commands use it too); the classifier refuses.
    (unit,) = lex(ATTACK_STRING)
    assert unit.params[0].text == "a;VOLT 20.0,(@2);OUTP 1,(@2);X"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ('DISP:TEXT "a\nOUTP ON"', -102),
        ('DISP:TEXT "a\rOUTP ON"', -102),
        ('DISP:TEXT "a\r\nOUTP ON"', -102),
        ('DISP:TEXT "a\x00"', -101),
        ('DISP:TEXT "a\x04"', -101),  # EOT
        ("DISP:TEXT #13a\nb", -102),
        ("DISP:TEXT #0a\rb", -102),
        ('DISP:TEXT "a\uff1bOUTP ON"', -101),  # a full-width ';'
    ],
)
def test_line_breaks_and_control_bytes_in_data_stay_refused_message_wide(
    message: str, code: int
) -> None:
    assert refused(message).code == code


@pytest.mark.parametrize(
    ("message", "canonical"),
    [
        ('DISP:TEXT "a,b:c"', 'DISP:TEXT "a,b:c"'),
        ('DISP:TEXT "#0abc"', 'DISP:TEXT "#0abc"'),  # '#' in a string is only a character
        ('DISP:TEXT "#15;"', None),  # ...but its ';' is not
        ('DISP:TEXT "a\\nb"', 'DISP:TEXT "a\\nb"'),  # a backslash is data, never an escape
        ('DISP:TEXT "C:\\x3b\\073"', 'DISP:TEXT "C:\\x3b\\073"'),
        ("DISP:TEXT 'say \"hi\"'", 'DISP:TEXT "say ""hi"""'),
        ('DISP:TEXT "a\tb"', 'DISP:TEXT "a\tb"'),
        ("DISP:TEXT #0abc", "DISP:TEXT #13abc"),  # indefinite becomes definite
        ("DISP:TEXT #0", "DISP:TEXT #10"),
        ('DISP:TEXT #13a"b', 'DISP:TEXT #13a"b'),
        ("DISP:TEXT #15a,b#c", "DISP:TEXT #15a,b#c"),
    ],
)
def test_other_characters_in_data_stay_data(message: str, canonical: str | None) -> None:
    if canonical is None:
        assert refused(message).code == -151
        return
    (unit,) = classify(message, "generic").units  # the PSU knows DISP:TEXT: harmless
    assert unit.effect is Effect.UNKNOWN
    assert unit.canonical == canonical
    if "#" not in message.split(" ", 1)[1][:1]:  # block data is not text on the PSU (-104)
        (known,) = classify(message, PSU).units
        assert known.effect is Effect.HARMLESS
        assert known.canonical == canonical
    assert len(lex(unit.canonical)) == 1
    assert naive_pieces(unit.canonical) == [unit.canonical]


@pytest.mark.parametrize("message", ["DISP:TEXT (a;b)", "FOO (1;OUTP ON)", 'FOO ("a")',
                                     "FOO (';')", "MEAS:VOLT? (@1;2)"])
def test_expressions_refuse_separators_and_quotes_alike(message: str) -> None:
    assert refused(message).code == -171


# --- the opt-in -----------------------------------------------------------------------------


def test_the_opt_in_accepts_separators_for_that_header_form_only(optin: str) -> None:
    (unit,) = classify(ATTACK_STRING, optin).units
    assert unit.effect is Effect.STATE
    assert unit.canonical == 'DISP:TEXT "a;VOLT 20.0,(@2);OUTP 1,(@2);X"'
    assert unit.value is None
    assert len(lex(unit.canonical)) == 1
    (unit,) = classify("DISPlay:WINDow:TEXT:DATA 'a;b'", optin).units
    assert unit.canonical == 'DISP:TEXT "a;b"'
    # the same profile, another header: no opt-in
    assert refused("DISP:TEXT:LAB 'a;b'", optin).code == -151
    assert classify("DISP:TEXT:LAB 'a,b'", optin).canonical == ('DISP:TEXT:LAB "a,b"',)
    # an unknown header never gets the opt-in
    assert refused("DISP:TEXT:FOO 'a;b'", optin).code == -151
    assert refused("FOO #14a;bc", optin).code == -161


def test_the_opt_in_accepts_blocks_and_renders_them_definite(optin: str) -> None:
    assert classify("DATA:BLOC #14a;bc", optin).canonical == ("DATA:BLOC #14a;bc",)
    assert classify("DATA:BLOC #14a;bc;*IDN?", optin).canonical == ("DATA:BLOC #14a;bc",
                                                                    "*IDN?")
    # an indefinite block is the rest of the message (IEEE 488.2 §7.7.6.2), sent definite
    (unit,) = classify("DATA:BLOC #0x;CURR 4.5,(@1)", optin).units
    assert unit.canonical == "DATA:BLOC #215x;CURR 4.5,(@1)"
    assert len(lex(unit.canonical)) == 1
    assert refused("DATA:BLOC 'a;b'", optin).code == -104  # a block, not a string


def test_the_opt_in_never_admits_line_breaks(optin: str) -> None:
    assert refused('DISP:TEXT "a\nOUTP ON"', optin).code == -102
    assert refused("DATA:BLOC #13a\rb", optin).code == -102
    assert refused('DISP:TEXT "a\x00"', optin).code == -101


def test_a_known_string_parameter_is_rendered_quoted(optin: str) -> None:
    # Regression: a 'string' parameter was rendered bare (DISP:TEXT:LAB a,b), which is two
    # parameters of character data to the instrument.
    assert classify("DISP:TEXT:LAB 'it''s, ok'", optin).canonical == (
        'DISP:TEXT:LAB "it\'s, ok"',)
    # and so is one that goes through an expansion: it stays one datum
    assert classify("DATA:NOTE 'x,y'", optin).canonical == ('DISP:TEXT "x,y"',)
    assert refused("DATA:NOTE 'x;*RST'", optin).code == -151


def test_profile_keys_are_checked(tmp_path: Path) -> None:
    def load(name: str, form: str, params: str = "[{name: t, type: string}]") -> None:
        path = tmp_path / f"{name}.yaml"
        path.write_text(f"name: {name}\ntitle: t\ncommands:\n  - header: \"FOO\"\n"
                        f"    set: {{effect: harmless, params: {params}, {form}}}\n",
                        encoding="utf-8")
        get_profile(str(path))

    load("fine", "separators_in_data: true")
    load("fineblock", "separators_in_data: true", "[{name: b, type: block}]")
    with pytest.raises(ProfileError, match="separators_in_data needs a string or block"):
        load("nostring", "separators_in_data: true", "[{name: n, type: integer}]")
    with pytest.raises(ProfileError, match=r"extra_forbidden|Extra inputs"):
        load("typo", "separators: true")
    load("local", "local: true", "[]")
    path = tmp_path / "localstate.yaml"
    path.write_text('name: localstate\ntitle: t\ncommands:\n  - header: "*RST"\n'
                    "    set: {effect: state, local: true}\n", encoding="utf-8")
    with pytest.raises(ProfileError, match="can be local"):
        get_profile(str(path))
    path = tmp_path / "localquery.yaml"
    path.write_text('name: localquery\ntitle: t\ncommands:\n  - header: "*OPC"\n'
                    "    query: {effect: harmless, local: true}\n", encoding="utf-8")
    with pytest.raises(ProfileError, match="can be local"):
        get_profile(str(path))


@pytest.mark.parametrize("profile", SHIPPED)
def test_no_shipped_profile_opts_in(profile: str) -> None:
    for command in get_profile(profile).model.commands:
        for form in (command.set, command.query):
            assert form is None or not form.separators_in_data, command.header


# --- the final guard --------------------------------------------------------------------------


def test_the_guard_refuses_a_rendering_that_is_not_one_unit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A renderer that forgot to double the quote: 'FOO "guard"x"' lexes as garbage.
    monkeypatch.setattr(units, "quote", lambda text: '"' + text + '"')
    err = refused('FOO "guard""x"', "generic")
    assert (err.code, err.pos) == (-100, 0)
    assert "exactly one unit" in err.detail and "guard" not in err.detail


def test_the_guard_refuses_a_separator_the_lexer_would_not_split(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One unit to our lexer ('FOO "ab;"'), two to a naive parser.
    monkeypatch.setattr(units, "quote", lambda text: '"' + text + ';"')
    assert refused('FOO "guard-ab"', "generic").code == -100
    monkeypatch.undo()
    monkeypatch.setattr(units, "render_value", lambda value: "5;OUTP 1")
    # A message no other test classifies: a cached classification would not render again.
    assert refused("VOLT 4.2517,(@1)").code == -100


# --- properties -------------------------------------------------------------------------------

DATA_CHARS = string.ascii_letters + string.digits + " \t;;;,:#@()'\"*?\\"
HEADERS = ["DISP:TEXT", "FOO", "SYST:BEEP", "*XYZ", "MEAS:VOLT?", "VOLT", "CAL:SEC:STAT",
           "DISP:TEXT?", "GATE:GOAL", "OUTP"]


def _quoted(text: str, quote: str) -> str:
    return quote + text.replace(quote, quote * 2) + quote


@st.composite
def datum(draw: st.DrawFn) -> tuple[str, str]:
    """(the datum as sent, its content)."""
    text = draw(st.text(DATA_CHARS, max_size=24))
    kind = draw(st.sampled_from(["dq", "sq", "definite", "indefinite"]))
    if kind == "dq":
        return _quoted(text, '"'), text
    if kind == "sq":
        return _quoted(text, "'"), text
    if kind == "definite":
        length = str(len(text))
        return f"#{len(length)}{length}{text}", text
    return "#0" + text, text


@st.composite
def message_with_data(draw: st.DrawFn) -> tuple[str, str, list[str]]:
    """(profile, message, the content of every string or block in it)."""
    profile = draw(st.sampled_from(SHIPPED))
    units: list[str] = []
    contents: list[str] = []
    for i in range(draw(st.integers(1, 3))):
        head = draw(st.sampled_from(HEADERS))
        sent, content = draw(datum())
        params = [sent]
        if draw(st.booleans()):
            params.insert(0, draw(st.sampled_from(["1", "ON", "(@1)", "CH1"])))
        if sent.startswith("#0"):  # the rest of the message: nothing may follow it
            units.append(("" if i == 0 or head.startswith("*") else ":") + head + " " +
                         ",".join(params))
            contents.append(content)
            break
        units.append(("" if i == 0 or head.startswith("*") else ":") + head + " " +
                     ",".join(params))
        contents.append(content)
    return profile, ";".join(units), contents


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message_with_data())
def test_accepted_canonical_text_is_one_unit_to_a_naive_parser(
    case: tuple[str, str, list[str]],
) -> None:
    profile, message, contents = case
    try:
        result = classify(message, profile)
    except ScpiError as err:
        if any(";" in c for c in contents):
            return  # refused: by the rule or by something earlier in the message
        assert err.code not in (-151, -161, -100), (message, err)
        return
    assert not any(";" in c for c in contents), (message, result.canonical)
    for unit in result.units:
        text = unit.canonical
        assert ";" not in text and "\r" not in text and "\n" not in text, text
        assert text.split(";") == [text]
        assert len(lex(text)) == 1, text


@settings(max_examples=800, deadline=None)
@given(st.sampled_from(SHIPPED), st.sampled_from(HEADERS), datum(),
       st.text(DATA_CHARS, max_size=8), st.text(DATA_CHARS, max_size=8))
def test_data_with_a_separator_is_always_refused(
    profile: str, head: str, sent_content: tuple[str, str], before: str, after: str
) -> None:
    sent, content = sent_content
    content = before + ";" + content + after
    if sent.startswith(("'", '"')):
        sent, code = _quoted(content, sent[0]), -151
    elif sent.startswith("#0"):
        sent, code = "#0" + content, -161
    else:
        length = str(len(content))
        sent, code = f"#{len(length)}{length}{content}", -161
    message = f"{head} {sent}"
    with pytest.raises(ScpiError) as info:
        classify(message, profile)
    assert info.value.code == code, message
    assert not is_read_only(message, profile=profile)


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.text(DATA_CHARS, max_size=24), quote=st.sampled_from(["'", '"']))
def test_the_opt_in_keeps_the_data_and_one_unit(optin: str, content: str, quote: str) -> None:
    (unit,) = classify("DISP:TEXT " + _quoted(content, quote), optin).units
    (raw,) = lex(unit.canonical)
    assert raw.params[0].text == content  # type: ignore[union-attr]
    length = str(len(content))
    (unit,) = classify(f"DATA:BLOC #{len(length)}{length}{content}", optin).units
    (raw,) = lex(unit.canonical)
    assert raw.params[0].data == content  # type: ignore[union-attr]


# --- IEEE 488.2 status commands -----------------------------------------------------------


def _has_status_commands(profile: str) -> bool:
    """A profile whose instrument has the IEEE 488.2 status commands (the SPD3303X's guide
    lists none of them: its profile says so in ``lacks``, and they are held there)."""
    return "*CLS" not in get_profile(profile).model.lacks


@pytest.mark.parametrize("profile", [p for p in SHIPPED if not _has_status_commands(p)])
def test_status_commands_an_instrument_lacks_are_never_sent_unattended(profile: str) -> None:
    for unit in classify("*OPC;*WAI;*ESE 4;*SRE 16;*CLS;*ESE?;*SRE?;*OPC?", profile).units:
        assert not unit.local and approval_for(unit, PolicyConfig()) is not None, unit


@pytest.mark.parametrize("profile", [p for p in SHIPPED if _has_status_commands(p)])
def test_cls_is_local_on_every_shipped_profile(profile: str) -> None:
    (unit,) = classify("*CLS", profile).units
    assert (unit.canonical, unit.effect, unit.local) == ("*CLS", Effect.HARMLESS, True)
    assert approval_for(unit, PolicyConfig()) is None
    (unit,) = classify("*cls", profile).units
    assert unit.local


@pytest.mark.parametrize("profile", [p for p in SHIPPED if _has_status_commands(p)])
def test_status_commands_are_harmless_sent_and_unattended(profile: str) -> None:
    result = classify("*OPC;*WAI;*ESE 4;*SRE 16;*CLS;*ESE?;*SRE?;*OPC?", profile)
    assert [(u.canonical, u.effect, u.local) for u in result.units] == [
        ("*OPC", Effect.HARMLESS, False), ("*WAI", Effect.HARMLESS, False),
        ("*ESE 4", Effect.HARMLESS, False), ("*SRE 16", Effect.HARMLESS, False),
        ("*CLS", Effect.HARMLESS, True), ("*ESE?", Effect.READ, False),
        ("*SRE?", Effect.READ, False), ("*OPC?", Effect.READ, False)]
    assert all(approval_for(u, PolicyConfig()) is None for u in result.units)
    assert not result.read_only  # harmless is not a read


def test_only_the_doors_own_clears_are_local() -> None:
    """A local form is never sent, so it must be one the socket door answers itself:
    ``*CLS`` and the Keithleys' ``SYSTem:CLEar`` (their event log, every client's), each a
    clear of the connection's own errors (bench_gate.proxy.Role); else it would do nothing."""
    from bench_gate.proxy import Role, status_plan
    from bench_gate.scpi import canonical_header

    seen = set()
    for profile in SHIPPED:
        for command in get_profile(profile).model.commands:
            for form in (command.set, command.query):
                if form is not None and form.local:
                    assert form is command.set, (profile, command.header)
                    header = canonical_header(command)
                    plan = status_plan(profile, header)
                    assert plan is not None and plan.units in (
                        ((Role.CLEAR, False),), ((Role.CLEAR_QUEUE, False),)), header
                    seen.add(header)
    assert seen == {"*CLS", "SYST:CLE"}


def test_local_passes_through_expansions_and_cache() -> None:
    a = classify("*CLS;*IDN?", PSU)
    assert classify("*CLS;*IDN?", PSU) is a
    assert [u.local for u in a.units] == [True, False]
    # a Unit built positionally (as before the field existed) is not local
    unit = units.Unit(0, 0, "*OPC", "*OPC", False, Effect.HARMLESS, None, None, None,
                          "*OPC")
    assert unit.local is False


def test_the_fuzzer_payloads_are_all_refused_on_every_header_form() -> None:
    from bench.fuzz_scpi import check_separator_payloads

    assert check_separator_payloads() > 10_000
