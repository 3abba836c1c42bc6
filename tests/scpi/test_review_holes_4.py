"""The fourth hostile review of the SCPI language layer, as properties of ``classify``: a
message means to the gateway what it means to the instrument's manual, for every spelling.
The end-to-end proofs on the simulators' own ports are in
tests/core/test_review_holes_4_scpi.py.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bench_gate.scpi import classify

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
