"""The fourth hostile review of the SCPI language layer, as properties of ``classify``: a
message means to the gateway what it means to the instrument's manual, for every spelling.
The end-to-end proofs on the simulators' own ports are in
tests/core/test_review_holes_4_scpi.py.
"""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from bench_gate.scpi import (
    Effect,
    ScpiError,
    available_profiles,
    classify,
    command_examples,
    get_profile,
    query_examples,
)

#: (profile, a header prefix whose last node carries a numeric suffix, its suffixes, leaves
#: that follow it). The prefix's suffix is the channel, the pin or the register.
SUFFIXED_PATHS = [
    ("dp832", "SOURce{n}", (1, 2, 3), ["VOLTage 1", "CURRent 0.1", "VOLTage?", "CURRent?",
                                       "VOLTage:PROTection 3", "CURRent:PROTection 0.2"]),
    ("spd3303x", "CH{n}", (1, 2), ["VOLTage 1", "CURRent 0.1", "VOLTage?", "CURRent?"]),
    ("k2450", "SOURce{n}", (1,), ["VOLTage 1", "VOLTage:ILIMit 0.01", "FUNCtion VOLT"]),
    ("e36312a", "STATus:QUEStionable:INSTrument:ISUMmary{n}", (1, 2, 3),
     ["CONDition?", "EVENt?", "ENABle 3"]),
    ("e36312a", "DIGital:PIN{n}", (1, 2, 3), ["FUNCtion DIO", "POLarity NEG"]),
]


def _spell(word: str, short: bool, lower: bool) -> str:
    """A header as a client might type it: its long or short forms, in either case."""
    head, _, rest = word.partition(" ")
    if short:
        head = ":".join("".join(c for c in node if not c.islower()) for node in head.split(":"))
    if lower:
        head = head.lower()
    return head + (" " + rest if rest else "")


@settings(deadline=None, max_examples=300)
@given(case=st.sampled_from(SUFFIXED_PATHS), data=st.data(),
       short=st.booleans(), lower=st.booleans())
def test_a_relative_header_keeps_the_suffix_of_its_path(
        case: tuple[str, str, tuple[int, ...], list[str]], data: st.DataObject,
        short: bool, lower: bool) -> None:
    """SCPI-99 Vol. 1 §6.2.4: after ``SOUR2:VOLT 5`` the path is ``SOUR2:``, so a bare
    ``CURR 0.1`` is ``SOUR2:CURR 0.1``. The gateway dropped the suffix, so the unit went to
    suffix 1 (CH1, pin 1, register 1), or the selected channel. For every profile with a
    suffixed node, every leaf pair, every spelling: the relative unit is the absolute one."""
    profile, prefix, suffixes, leaves = case
    n = data.draw(st.sampled_from(suffixes))
    # The first leaf is one node, so the path after it is the prefix alone.
    first = data.draw(st.sampled_from([w for w in leaves if ":" not in w.split(" ")[0]]))
    second = data.draw(st.sampled_from(leaves))
    head = _spell(prefix.format(n=n), short, lower)
    relative = classify(f":{head}:{_spell(first, short, lower)};{_spell(second, short, lower)}",
                        profile, selected=1)
    absolute = classify(f":{head}:{_spell(second, short, lower)}", profile, selected=1)
    got, want = relative.units[-1], absolute.units[-1]
    assert (got.canonical, got.channel, got.field, got.value) == (
        want.canonical, want.channel, want.field, want.value)


def test_a_common_command_leaves_the_suffixed_path_alone() -> None:
    """IEEE 488.2 §7.6.1.2 and SCPI-99 §6.2.4: a common command between two units does not
    reset the path, suffix included."""
    units = classify(":SOUR2:VOLT 5;*WAI;CURR 0.2", "dp832", selected=1).units
    assert [(u.canonical, u.channel) for u in units] == [
        ("SOUR2:VOLT 5.0", 2), ("*WAI", None), ("SOUR2:CURR 0.2", 2)]


def test_a_leading_colon_returns_to_the_root_and_the_selection() -> None:
    units = classify(":SOUR2:VOLT 5;:CURR 0.2", "dp832", selected=3).units
    assert [(u.canonical, u.channel) for u in units] == [
        ("SOUR2:VOLT 5.0", 2), ("SOUR3:CURR 0.2", 3)]


#: A setpoint of ``{field}`` on channel ``{ch}``, as each profile's own clients write it.
SETPOINTS = [
    ("e36312a", "VOLT {v},(@{ch})", "voltage"), ("e36312a", "CURR {v},(@{ch})", "current"),
    ("e3631a", "INST:NSEL {ch};:VOLT {v}", "voltage"),
    ("e3631a", "INST:NSEL {ch};:CURR {v}", "current"),
    ("e3631a", "APPL {name},{v}", "voltage"),
    ("dp832", ":SOUR{ch}:VOLT {v}", "voltage"), ("dp832", ":SOUR{ch}:CURR {v}", "current"),
    ("spd3303x", "CH{ch}:VOLT {v}", "voltage"), ("spd3303x", "CH{ch}:CURR {v}", "current"),
    # (the SPD3303X's CH3 is fixed: only CH1 and CH2 take setpoints)
    ("k2450", ":SOUR:VOLT {v}", "voltage"), ("k2450", ":SOUR:CURR {v}", "current_level"),
    ("dl3021", ":CURR {v}", "current"), ("dl3021", ":VOLT {v}", "voltage"),
]


@settings(deadline=None, max_examples=200)
@given(case=st.sampled_from(SETPOINTS), data=st.data(),
       spelling=st.sampled_from([("MIN", "MAX"), ("MINimum", "MAXimum"), ("min", "max")]))
def test_min_is_never_farther_from_zero_than_max(
        case: tuple[str, str, str], data: st.DataObject, spelling: tuple[str, str]) -> None:
    """The manuals count MIN and MAX in magnitude where a range has no positive value (the
    E3631A's -25V output: MIN 0 V, MAX -25.75 V, User's Guide Table 4-1); the gateway took
    the range's lower end for MIN, so ``VOLT MIN`` there was -25.75 V. For every profile,
    channel and setpoint: MIN and MAX are the range's ends, and MIN is never farther from
    zero than MAX."""
    name, template, field = case
    profile = get_profile(name)
    ch = data.draw(st.sampled_from([c for c in profile.channels
                                    if name != "spd3303x" or c < 3]))
    low, high = profile.range_of(field, ch) or (None, None)
    assert low is not None and high is not None
    word = next(a for a, n in profile.channel_names.items() if n == ch) if "{name}" in \
        template else ""
    values = [classify(template.format(ch=ch, v=v, name=word), name, selected=ch).units[-1].value
              for v in spelling]
    least, most = (v for v in values if isinstance(v, Decimal))
    assert {least, most} == {low, high}
    assert abs(least) <= abs(most)


def _spellings(pattern_message: str) -> st.SearchStrategy[str]:
    """A message of the profile's examples, its header in another legal spelling: long or
    short form per node, either case."""
    head, sep, rest = pattern_message.partition(" ")
    nodes = head.split(":")

    def spell(choices: list[tuple[bool, bool]]) -> str:
        out = []
        for node, (short, lower) in zip(nodes, choices, strict=True):
            word = node
            if short and not word.startswith("*"):
                word = "".join(c for c in word if not c.islower())
            out.append(word.lower() if lower else word)
        return ":".join(out) + sep + rest
    return st.lists(st.tuples(st.booleans(), st.booleans()), min_size=len(nodes),
                    max_size=len(nodes)).map(spell)


def _examples() -> list[tuple[str, str]]:
    out = []
    for name in available_profiles():
        profile = get_profile(name)
        for ex in [*command_examples(profile), *query_examples(profile, frozenset(Effect))]:
            out.append((name, ex.message))
    return out


EXAMPLES = _examples()


@settings(deadline=None, max_examples=600)
@given(case=st.sampled_from(EXAMPLES), data=st.data())
def test_every_canonical_unit_means_the_same_alone_to_a_naive_parser(
        case: tuple[str, str], data: st.DataObject) -> None:
    """Only canonical SCPI the gateway rendered reaches an instrument, one unit at a time,
    and it must mean the same thing to the most naive parser: no separator a parser that
    splits at ';' and line ends would see, and, read again alone (with any selection, since
    the instrument's own is not the gateway's), the same one unit: header, effect, channel,
    field and value. For every profile's every header, spelled any legal way."""
    name, example = case
    profile = get_profile(name)
    message = data.draw(_spellings(example)) if ";" not in example else example
    selected = data.draw(st.sampled_from([None, *profile.channels]))
    if profile.channels and message.endswith(")") and data.draw(st.booleans()):
        # Without its channel list: the run's channel decides (intake asks the instrument
        # for it when the run has none, so a unit never goes out on no channel).
        message = message[: message.rindex("(@")].rstrip(" ,") if "(@" in message else message
        selected = data.draw(st.sampled_from(list(profile.channels)))
    try:
        units = classify(message, name, selected=selected).units
        if selected is None and profile.channels and profile.model.select_query and any(
                u.channel is None and u.field is not None for u in units):
            # As intake does: a unit acting on a channel it names none of (``APPLy?``) is
            # classified again on the instrument's selection, asked for then.
            selected = data.draw(st.sampled_from(list(profile.channels)))
            units = classify(message, name, selected=selected).units
    except ScpiError:
        return  # a spelling that is no header of this profile: refused, nothing sent
    for unit in units:
        if unit.effect in (Effect.FORBIDDEN, Effect.SELECT) or unit.local:
            continue
        text = unit.canonical
        assert not set(text) & set(";\r\n\x00"), text
        assert len(text.split(";")) == 1
        other = data.draw(st.sampled_from([None, *profile.channels]))
        again = classify(text, name, selected=other).units
        kinds = {(u.canonical, u.header, u.effect, u.field, u.value) for u in again}
        assert kinds == {(text, unit.header, unit.effect, unit.field, unit.value)}, (
            message, text, [u.canonical for u in again])
        if unit.channel is not None:
            assert unit.channel in {u.channel for u in again}, (message, text)
