"""Channel lists on an instrument that addresses its outputs by selection (the E3631A, the
DP832, the DL3021): the only list a unit may carry is the one the gateway renders for a
``channel: list`` form, and on the wire it becomes the select command and the unit without
it (``Profile.wire``). A list given as a parameter's data (the E3631A's ``INST:COUP (@2)``)
was stripped as if it were that list, so ``INST:COUP`` went out bare, not the text approved;
a list of several outputs, or an unknown header's, was held and then could not be sent at
all. Every such spelling is refused at once (-224); every unit that passes goes out as what
it means.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench_gate.scpi import (
    ChannelList,
    Effect,
    ScpiError,
    available_profiles,
    classify,
    command_examples,
    get_profile,
    lex,
    query_examples,
)

ADDRESSED = sorted(p for p in available_profiles() if get_profile(p).addressing is not None)
_EVERY = frozenset(Effect) - {Effect.FORBIDDEN}


def _lists(profile: str) -> list[str]:
    """Channel lists in every spelling, one output or several, for that profile."""
    chans = list(get_profile(profile).channels)
    first, last = chans[0], chans[-1]
    return [f"(@{first})", f"(@{last})", f"(@{first},{last})", f"(@{first}:{last})",
            f"( @ {last} )", f"(@{last}:{last})"]


def _messages(profile: str) -> list[str]:
    """Every example of the profile's headers, and each again with a channel list as its
    last datum, in place of its last datum, and as its only datum; unknown headers too."""
    p = get_profile(profile)
    out: list[str] = []
    for example in command_examples(p, _EVERY) + query_examples(p, _EVERY):
        message = example.message
        out.append(message)
        head, _, args = message.partition(" ")
        for listed in _lists(profile)[:4]:
            out.append(f"{message}{',' if args else ' '}{listed}")
            out.append(f"{head} {listed}")
            if args:
                out.append(f"{head} {args.rsplit(',', 1)[0] + ',' if ',' in args else ''}"
                           f"{listed}")
    for listed in _lists(profile):
        out += [f"FOO:BAR 5,{listed}", f"FOO:BAR? {listed}", f"FOO {listed},1"]
    return out


CASES = [(profile, message) for profile in ADDRESSED for message in _messages(profile)]


def test_the_e3631a_couples_outputs_by_name_never_by_a_list() -> None:
    for message in ("INST:COUP (@2)", "INST:COUP (@1,2)", "inst:couple:trigger (@1:3)",
                    ":INST:COUP ( @ 3 )", "INST:COUP P6V,(@2)"):
        with pytest.raises(ScpiError) as info:
            classify(message, "e3631a")
        assert info.value.code == -224, message
        assert "channel list" in info.value.detail
    assert classify("INST:COUP P6V,P25V", "e3631a").canonical == ("INST:COUP P6V,P25V",)
    assert get_profile("e3631a").wire("INST:COUP (@2)") is None  # never stripped to bare


@settings(max_examples=600, deadline=None)
@given(case=st.sampled_from(CASES), selected=st.sampled_from([None, 1, 2, 3]))
def test_every_unit_goes_out_as_what_it_means_or_is_refused(
        case: tuple[str, str], selected: int | None) -> None:
    """Refused (-224 for a list, or any other error), or each unit is sent as the gateway's
    select command and a text that, read by the gateway with that output selected, is the
    unit again: nothing of what was judged dropped on the way."""
    profile, message = case
    p = get_profile(profile)
    if selected is not None and selected not in p.channels:
        selected = None
    try:
        units = classify(message, profile, selected=selected).units
    except ScpiError:
        return
    for unit in units:
        texts = p.wire(unit.canonical)
        assert texts is not None, (message, unit.canonical)
        *_, bare = texts
        assert not any(isinstance(d, ChannelList) for u in lex(bare) for d in u.params), bare
        if bare == unit.canonical:
            continue
        again = classify(bare, profile, selected=unit.channel).units
        assert [u.canonical for u in again] == [unit.canonical], (message, texts)
