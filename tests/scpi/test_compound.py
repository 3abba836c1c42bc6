"""scpi/compound.py: a snapshot's fields in one compound query (IEEE 488.2 §7.4.1), split
back one answer per query, ``*IDN?`` last taking the rest (§8.7.11)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench_gate.scpi import ProfileError, available_profiles, classify, get_profile
from bench_gate.scpi.compound import IDN, CompoundAnswerError, joins, read_plan

E36312A = get_profile("e36312a")


def state_fields(profile_name: str, channel: int) -> list[tuple[int | None, str]]:
    profile = get_profile(profile_name)
    return [(channel, f) for f, spec in profile.fields.items()
            if not spec.measured and profile.has_field(f, channel)]


def test_the_e36312a_reads_its_number_and_boolean_fields_and_idn_in_one_message() -> None:
    fields = [*state_fields("e36312a", 2), *state_fields("e36312a", 3)]
    plan = read_plan(E36312A, fields)
    assert plan.message is not None and plan.message.endswith(";" + IDN)
    # OUTP:PAIR? answers one word (OFF, PAR, SER: character data, never a ';'): it joins.
    assert (2, "pairing") in plan.joined and plan.alone == ()
    assert set(plan.joined) | set(plan.alone) == set(fields)
    units = classify(plan.message, "e36312a").units
    assert [u.canonical for u in units[:-1]] == [
        E36312A.field_query(f, ch) for ch, f in plan.joined]
    assert all(u.query for u in units) and units[-1].canonical == IDN
    assert read_plan(E36312A, fields) is plan, "kept, not rendered again at every write"


def test_every_profile_that_joins_renders_a_message_its_parser_reads_one_unit_a_query(
        ) -> None:
    """Every unit from the root (a leading ':'): ``VOLT:PROT?`` then ``VOLT:PROT:TRIP?``
    would otherwise resolve under the first one's path (SCPI-99 §6.2.4)."""
    joining = [n for n in available_profiles() if get_profile(n).model.compound_queries]
    assert "e36312a" in joining
    for name in joining:
        profile = get_profile(name)
        for ch in profile.channels:
            plan = read_plan(profile, state_fields(name, ch))
            assert plan.message is not None, (name, ch)
            assert len(classify(plan.message, name).units) == len(plan.joined) + 1


def test_a_profile_that_does_not_say_so_asks_one_by_one() -> None:
    dp832 = get_profile("dp832")
    assert not dp832.model.compound_queries
    fields = state_fields("dp832", 1)
    plan = read_plan(dp832, fields)
    assert plan.message is None and plan.alone == tuple(fields) and plan.joined == ()
    assert not any(joins(dp832, f) for _, f in fields)


def test_compound_queries_cannot_go_with_addressing_by_selection(tmp_path: Path) -> None:
    shipped = Path(__file__).resolve().parents[2] / "bench_gate" / "profiles" / "e3631a.yaml"
    text = shipped.read_text(encoding="utf-8").replace("name: e3631a", "name: e3631a-joined")
    path = tmp_path / "joined.yaml"
    path.write_text(text + "\ncompound_queries: true\n", encoding="utf-8")
    with pytest.raises(ProfileError, match="compound_queries cannot go with addressing"):
        get_profile(str(path))


NUMBER = st.decimals(allow_nan=False, allow_infinity=False, places=3,
                     min_value=-1000, max_value=1000).map(lambda d: f"{d:+.6E}")
ANSWER = st.one_of(NUMBER, st.sampled_from(["0", "1", "ON", "OFF"]))
IDN_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"),
                   max_size=60).map(str.strip)


@given(answers=st.lists(ANSWER, min_size=1, max_size=16), idn=IDN_TEXT)
def test_answers_split_back_one_per_query_and_the_identity_keeps_its_semicolons(
        answers: list[str], idn: str) -> None:
    fields = [*state_fields("e36312a", 1), *state_fields("e36312a", 2),
              *state_fields("e36312a", 3)]
    joined = [f for f in fields if joins(E36312A, f[1])][: len(answers)]
    plan = read_plan(E36312A, joined)
    answers = answers[: len(plan.joined)]
    got, got_idn = plan.split(";".join([*answers, idn]))
    assert got == answers and got_idn == idn


@given(answers=st.lists(ANSWER, min_size=1, max_size=10), missing=st.integers(1, 10))
def test_an_answer_missing_never_splits(answers: list[str], missing: int) -> None:
    """Fewer answers than queries plus the identity (no ';' in the identity): refused. With
    a ';' in the identity the count may come out right, and then the identity differs from
    the one the approver saw (tests/core/test_compound_recheck.py)."""
    fields = state_fields("e36312a", 1)
    plan = read_plan(E36312A, fields)
    n = len(plan.joined)
    short = ";".join([*([*answers] * n)[: max(0, n - missing)], "Keysight,E36312A,1,2"])
    with pytest.raises(CompoundAnswerError):
        plan.split(short)


def _e36312a_with(tmp_path: Path, old: str, new: str) -> Path:
    shipped = Path(__file__).resolve().parents[2] / "bench_gate" / "profiles" / "e36312a.yaml"
    text = shipped.read_text(encoding="utf-8")
    assert old in text
    name = f"e36312a-{tmp_path.name[-12:].lower().replace('_', '-')}"
    path = tmp_path / "edited.yaml"
    path.write_text(text.replace("name: e36312a", f"name: {name}").replace(old, new),
                    encoding="utf-8")
    return path


def test_a_text_field_the_profile_does_not_call_a_word_is_asked_alone(tmp_path: Path) -> None:
    """String data may hold a ';' (IEEE 488.2 §8.7.8): only ``word: true`` joins a text
    field, and without it the field is asked on its own, as before."""
    profile = get_profile(str(_e36312a_with(tmp_path, "type: text, word: true,", "type: text,")))
    assert not joins(profile, "pairing")
    plan = read_plan(profile, [*state_fields("e36312a", 2), *state_fields("e36312a", 3)])
    assert plan.alone == ((2, "pairing"),)
    assert plan.message is not None and "OUTP:PAIR?" not in plan.message


def test_word_is_for_a_text_field(tmp_path: Path) -> None:
    path = _e36312a_with(tmp_path, "tracking: {label: CH3 tracks CH2, type: boolean,",
                         "tracking: {label: CH3 tracks CH2, type: boolean, word: true,")
    with pytest.raises(ProfileError, match="word is for a text field"):
        get_profile(str(path))
