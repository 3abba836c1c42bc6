"""Every shipped profile against its simulator: every query the profile lets pass is answered,
every command it knows (forbidden ones aside) is taken without an error, so an approved
request never ends ambiguous on the simulated bench; and bench.yaml still holds what the
profiles' settings need.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench_gate.scpi import (
    PASSING,
    Effect,
    Example,
    classify,
    command_examples,
    get_profile,
    query_examples,
)
from sim_instruments import SimBench, SimInstrument, bench_yaml_path, update_bench_yaml

NO_ERROR = '+0,"No error"'
#: Each shipped profile that has a simulator, and the simulated instrument that plays it.
SIMULATED = {"e36312a": "psu", "34465a": "dmm"}


@pytest.fixture(scope="module")
def bench() -> Iterator[SimBench]:
    sim = SimBench()
    yield sim
    sim.psu.close()
    sim.dmm.close()


def _instrument(bench: SimBench, profile: str) -> SimInstrument:
    instrument: SimInstrument = getattr(bench, SIMULATED[profile])
    return instrument


def _run(instrument: SimInstrument, example: Example) -> tuple[str | None, str]:
    answer = instrument.handle_message(example.message)
    return answer, instrument.handle_message("SYST:ERR?") or ""


@pytest.mark.parametrize("profile", sorted(SIMULATED))
def test_every_query_a_profile_passes_is_answered_by_its_simulator(
        bench: SimBench, profile: str) -> None:
    instrument = _instrument(bench, profile)
    examples = query_examples(get_profile(profile))
    assert len(examples) > 100
    unanswered = []
    for example in examples:
        if not classify(example.message, profile, selected=1).effects <= PASSING:
            continue  # MEAS:TEMP? with an RTD excites: held (the next test sends it)
        answer, error = _run(instrument, example)
        if not answer or error != NO_ERROR:
            unanswered.append((example.message, answer, error))
    assert unanswered == []


@pytest.mark.parametrize("profile", sorted(SIMULATED))
def test_every_command_a_profile_knows_is_taken_by_its_simulator(
        bench: SimBench, profile: str) -> None:
    """Held ones too: once approved they run, and the simulated bench must take them."""
    instrument = _instrument(bench, profile)
    known = get_profile(profile)
    every = frozenset(Effect) - {Effect.FORBIDDEN}
    refused = []
    for example in command_examples(known, every) + query_examples(known, every):
        answer, error = _run(instrument, example)
        if error != NO_ERROR or (example.query and not answer):
            refused.append((example.message, answer, error))
    instrument.handle_message("*RST")
    assert refused == []


@pytest.mark.parametrize("profile", sorted(SIMULATED))
def test_bench_yaml_holds_every_setting_of_the_profile(profile: str) -> None:
    text = bench_yaml_path().read_text(encoding="utf-8")
    assert update_bench_yaml(text, get_profile(profile)) == text, (
        "bench.yaml is behind the profile: python -m sim_instruments settings --write")


@pytest.mark.parametrize("profile", sorted(SIMULATED))
def test_keywords_reach_the_simulator_as_numbers(bench: SimBench, profile: str) -> None:
    instrument = _instrument(bench, profile)
    if profile == "34465a":
        assert instrument.handle_message("VOLT:NPLC MAX;:VOLT:NPLC?") == "+1.00000000E+02"
        assert instrument.handle_message("VOLT:NPLC? MIN") == "+1.00000000E-03"
        assert instrument.handle_message("TRIG:COUN INF;:TRIG:COUN?") == "+9.90000000E+37"
        assert instrument.handle_message("VOLT:RANG:AUTO OFF;:VOLT:RANG:AUTO?") == "0"
    else:
        assert instrument.handle_message("VOLT:PROT? MAX,(@2)") == "+2.75000000E+01"
        assert instrument.handle_message("CURR:PROT:STAT ON,(@3);:CURR:PROT:STAT? (@3)") == "1"
    assert instrument.handle_message("SYST:ERR?") == NO_ERROR
    instrument.handle_message("*RST")


def test_the_driver_corpus_has_no_false_hold_and_no_unsafe_pass(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The figures in docs/scpi.md, on the messages bench/driver_corpus.py recorded."""
    from bench.classify import CORPUS, corpus_report

    assert corpus_report(CORPUS) == 0
    out = capsys.readouterr().out
    for profile in SIMULATED:
        line = next(x for x in out.splitlines() if x.startswith(f"{profile}:"))
        assert "false holds 0, false refusals 0" in line and line.endswith("unsafe passes 0")
