"""Every spelling of a header is judged as the header: its short form, its long form, the
short form SCPI-99's rule makes of it where the guide's casing says another (Vol. 1
§6.2.1: four letters, three when the fourth is a vowel: the SPD3303X guide's ``TIMEr`` is
TIM by the rule, TIME by its casing), any case, optional nodes sent or not. Before, ``TIM
CH1,ON`` was held as an unknown command while ``TIMEr CH1,ON`` was refused: one command,
two judgements. A truncation between the two forms (``OUTPU``) is no SCPI spelling, but a
lenient parser may run it as the header: it is refused (-113), never held as unknown.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench_gate.scpi import (
    Classification,
    Effect,
    Example,
    Node,
    ScpiError,
    available_profiles,
    classify,
    command_examples,
    get_profile,
    parse_pattern,
    query_examples,
)


def judged(message: str, profile: str) -> tuple[object, ...]:
    """What the gateway makes of a message: its units' effects and canonical renderings,
    or the SCPI error number it is refused with."""
    try:
        result: Classification = classify(message, profile)
    except ScpiError as exc:
        return ("refused", exc.code)
    return ("units", tuple((u.effect, u.canonical) for u in result.units))


def examples(profile: str) -> list[Example]:
    """One-unit examples of every form of the profile's non-common headers."""
    p = get_profile(profile)
    return [e for e in (*command_examples(p), *query_examples(p, frozenset(Effect)))
            if ";" not in e.message and not e.header.startswith("*")]


def by_rule(long: str) -> set[str]:
    """SCPI-99's short form of a long form, worked out here (Y counted a vowel or not)."""
    if len(long) <= 4:
        return {long}
    return {long[:3] if long[3] in "AEIOU" else long[:4]} | (
        {long[:3]} if long[3] == "Y" else set())


def forms(node: Node) -> list[str]:
    return sorted({node.short, node.long, *by_rule(node.long)})


def header(nodes: tuple[Node, ...], words: tuple[str | None, ...]) -> str:
    """The nodes spelled ``words`` (None: an optional node left out), with each numbered
    node's number (its fixed one, else 1)."""
    out = []
    for node, word in zip(nodes, words, strict=True):
        if word is not None:
            number = node.fixed if node.fixed is not None else 1 if node.suffix else None
            out.append(word + (str(number) if number is not None else ""))
    return ":".join(out)


def tail(example: Example) -> str:
    """The example's parameters (and '?'), after its header."""
    params = example.message.partition(" ")[2]
    return ("?" if example.query else "") + (" " + params if params else "")


def reference(nodes: tuple[Node, ...]) -> tuple[str | None, ...]:
    """Short forms; an optional numbered node (``[CH#:]``) left out, as the example does."""
    return tuple(None if n.optional and n.suffix and n.fixed is None else n.short
                 for n in nodes)


def cased(word: str, how: int) -> str:
    return [word.upper(), word.lower(), word.capitalize(), word.swapcase()][how % 4]


SPD = "spd3303x"


@pytest.mark.parametrize("example", examples(SPD), ids=lambda e: e.message)
def test_every_spelling_of_every_spd3303x_header_is_judged_alike(example: Example) -> None:
    nodes = parse_pattern(example.header)
    ref = reference(nodes)
    expected = judged(header(nodes, ref) + tail(example), SPD)
    options = [[None] if r is None else [*forms(n), *([None] if n.optional else [])]
               for n, r in zip(nodes, ref, strict=True)]
    for i, words in enumerate(itertools.product(*options)):
        spelled = tuple(None if w is None else cased(w, i + k) for k, w in enumerate(words))
        message = header(nodes, spelled) + tail(example)
        assert judged(message, SPD) == expected, (message, header(nodes, ref) + tail(example))


@pytest.mark.parametrize("message", ["TIM CH1,ON", "tim ch1,on", "TIMEr CH1,ON", "TIME CH1,ON",
                                     "TIMER CH1,ON", "Timer CH1,ON"])
def test_starting_the_timer_is_refused_however_it_is_spelled(message: str) -> None:
    assert judged(message, SPD) == ("refused", -224)


@pytest.mark.parametrize("message", ["OUTPU CH1,ON", "CH1:VOLTA 5", "VOLTAG 5", "INSTR CH2",
                                     "MEASU:VOLT? CH1", "SYSTE:STAT?"])
def test_a_truncation_between_the_two_forms_is_refused_not_held(message: str) -> None:
    assert judged(message, SPD) == ("refused", -113)


ALL = [(name, e) for name in available_profiles() for e in examples(name)]


@settings(max_examples=400, deadline=None)
@given(data=st.data(), index=st.integers(0, len(ALL) - 1))
def test_every_shipped_profile_judges_every_spelling_alike(data: st.DataObject,
                                                           index: int) -> None:
    profile, example = ALL[index]
    nodes = parse_pattern(example.header)
    ref = reference(nodes)
    expected = judged(header(nodes, ref) + tail(example), profile)
    words = tuple(None if r is None else data.draw(st.sampled_from(
        [*forms(n), *([None] if n.optional and not n.suffix else [])]))
        for n, r in zip(nodes, ref, strict=True))
    spelled = tuple(None if w is None else cased(w, data.draw(st.integers(0, 3)))
                    for w in words)
    message = header(nodes, spelled) + tail(example)
    assert judged(message, profile) == expected, (profile, message)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), index=st.integers(0, len(ALL) - 1))
def test_a_truncation_of_any_header_is_never_held_as_unknown(data: st.DataObject,
                                                             index: int) -> None:
    """A node cut between its short and long form: refused, or (where the cut is itself
    a spelling of another header) judged as that one; never an unknown to approve."""
    profile, example = ALL[index]
    nodes = parse_pattern(example.header)
    ref = list(reference(nodes))
    cuttable = [i for i, n in enumerate(nodes) if ref[i] is not None
                and len(n.long) - min(len(w) for w in forms(n)) > 1]
    if not cuttable:
        return
    i = data.draw(st.sampled_from(cuttable))
    node = nodes[i]
    shortest = min(len(w) for w in forms(node))
    ref[i] = node.long[:data.draw(st.integers(shortest + 1, len(node.long) - 1))]
    message = header(nodes, tuple(ref)) + tail(example)
    result = judged(message, profile)
    units = result[1] if isinstance(result[1], tuple) else ()
    assert result[0] == "refused" or all(
        effect is not Effect.UNKNOWN for effect, _ in units), (profile, message, result)


#: A lab's supply whose guide spells two headers TIMIng (read) and TIMEr (stops a timer):
#: SCPI-99's rule makes TIM of both (fourth letter a vowel).
TIMING = """\
  - header: "TIMIng"
    query: {effect: read}
"""
TIMER = """\
  - header: "TIMEr"
    set: {effect: state, params: [{name: state, type: choice, choices: ["OFF"]}]}
"""


@pytest.mark.parametrize("order", ["timing-first", "timer-first"])
def test_a_rule_made_spelling_of_two_headers_is_refused_whatever_the_order(
        order: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Before, ``TIM`` went to whichever header the file listed first: ``TIM?`` read the
    timing and ``TIM OFF`` was refused as a query only, or the other way round with the
    headers swapped. An instrument built to the rule could run either: refused (-113)."""
    name = f"rule-clash-{order}"
    commands = TIMING + TIMER if order == "timing-first" else TIMER + TIMING
    path = tmp_path_factory.mktemp("profiles") / f"{name}.yaml"
    path.write_text(f"name: {name}\ntitle: Lab supply with a timing read and a timer\n"
                    "commands:\n" + commands, encoding="utf-8")
    get_profile(str(path))
    for message in ["TIM?", "TIM OFF", "tim?", ":TIM OFF", "TIMI?;:TIM?"]:
        assert judged(message, name) == ("refused", -113), message
    # the guide's own spellings stay each header's
    assert judged("TIMI?", name) == judged("TIMING?", name) == (
        "units", ((Effect.READ, "TIMI?"),))
    assert judged("TIME OFF", name) == judged("TIMER OFF", name) == (
        "units", ((Effect.STATE, "TIME OFF"),))


def test_no_shipped_profile_has_a_rule_made_spelling_of_two_headers() -> None:
    assert {name: get_profile(name).clashes for name in available_profiles()} == {
        name: {} for name in available_profiles()}


@pytest.mark.parametrize("long_form", ["CONFIGURATION", "configuration", "Configuration"])
def test_a_guides_keyword_over_twelve_letters_is_judged_as_its_short_form(
        long_form: str) -> None:
    """IEEE 488.2 §7.6.1.4.1 caps a mnemonic at 12 characters, but the 2450's guide spells
    ``:SOURce[1]:CONFiguration:LIST:...`` (13): the long form the profile lists is judged
    as its short form (forbidden, -203 at the door), not refused -112 as too long."""
    assert judged(f"SOUR1:{long_form}:LIST:CRE \"setup\"", "k2450") == judged(
        "SOUR1:CONF:LIST:CRE \"setup\"", "k2450")


@pytest.mark.parametrize("word", ["CONFIGURATIONS", "ABCDEFGHIJKLM", "VOLTAGEPROTEC"])
def test_a_long_mnemonic_no_profile_lists_is_still_too_long(word: str) -> None:
    get_profile("k2450")  # its 13-letter keyword loaded: no other long word passes
    for profile in ("k2450", "e36312a", "generic"):
        assert judged(f"{word} 5", profile) == ("refused", -112)
