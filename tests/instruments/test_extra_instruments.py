"""Every instrument simulated on its own (sim_instruments.EXTRA: the Keithley 2450, the
DMM6500, the Keysight E3631A and the Rigol DL3021): its profile checks clean, its simulator
answers every query the profile passes (``bench-gate profile test --sim``, over LAN) and
takes every command and query the profile knows, held ones too (once approved they run),
and its pyvisa-sim definition holds every setting of the profile.
"""

from __future__ import annotations

import pytest

from bench_gate.cli import main
from bench_gate.scpi import Effect, command_examples, get_profile, query_examples
from sim_instruments import EXTRA, SimServedThread, extra_yaml_path, update_bench_yaml

#: Each extra simulated instrument and the profile it plays.
PLAYS = {name: model.profile for name, (model, _) in EXTRA.items()}
#: The 2450 and the DMM6500 answer an empty error queue without the '+', the E3631A with it.
NO_ERROR = '0,"No error"'


@pytest.mark.parametrize("profile", sorted(PLAYS.values()))
def test_the_profile_checks_clean(profile: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "check", f"bench_gate/profiles/{profile}.yaml"]) == 0
    assert "0 error(s), 0 warning(s)" in capsys.readouterr().out


@pytest.mark.parametrize("profile", sorted(PLAYS.values()))
def test_every_query_the_profile_passes_is_answered_over_lan(
        profile: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "test", profile, "--sim", "--passing", "--timeout", "2000"]) == 0
    out = capsys.readouterr().out
    assert "unanswered" not in out and ", 0 not" in out


@pytest.mark.parametrize("name", sorted(PLAYS))
def test_the_simulator_takes_every_command_and_query_the_profile_knows(name: str) -> None:
    known = get_profile(PLAYS[name])
    every = frozenset(Effect) - {Effect.FORBIDDEN}
    examples = command_examples(known, every) + query_examples(known, every)
    # At least one per header (the SPD3303X's Programming Guide has fewer than 20 headers).
    assert len(examples) >= len(known.model.commands) > 15
    refused = []
    with SimServedThread(name) as served:
        instrument = served.instrument
        for example in examples:
            answer = instrument.handle_message(example.message)
            error = instrument.handle_message("SYST:ERR?")
            if (error or "").lstrip("+") != NO_ERROR or (example.query and not answer):
                refused.append((example.message, answer, error))
            instrument.handle_message("*RST")
    assert refused == []


@pytest.mark.parametrize("name", sorted(PLAYS))
def test_the_definition_holds_every_setting_of_the_profile(name: str) -> None:
    text = extra_yaml_path(name).read_text(encoding="utf-8")
    assert update_bench_yaml(text, get_profile(PLAYS[name])) == text, (
        f"{extra_yaml_path(name).name} is behind the profile: "
        f"python -m sim_instruments settings {PLAYS[name]} --write")
