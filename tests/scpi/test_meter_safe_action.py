"""A meter's safe action in its profile (scpi ``MeterSafeSpec``): a command alone, read back
by the profile's excitation query. A meter profile without one, or one the gateway could not
read back, is said so by ``bench-gate profile check``."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench_gate.profile_check import Level, check_profile
from bench_gate.scpi import classify, get_profile

SAFE = """safe_action: {command: 'ABOR;:FUNC "VOLT"'}\n"""


def _variant(tmp_path: Path, old: str, new: str) -> str:
    text = (Path(__file__).parents[2] / "bench_gate/profiles/34465a.yaml").read_text(
        encoding="utf-8")
    assert text.count(old) == 1
    text = text.replace(old, new).replace("name: 34465a", "name: m-x")
    path = tmp_path / "m-x.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(("name", "units"), [("34465a", ["ABOR", 'FUNC "VOLT"']),
                                             ("dmm6500", ["ABOR", 'FUNC "VOLT"'])])
def test_the_shipped_meters_abort_and_select_dc_volts(name: str, units: list[str]) -> None:
    profile = get_profile(name)
    assert profile.safe_action is None  # no output: nothing reads a channel's state
    assert profile.meter_safe is not None
    c = classify(profile.meter_safe.command, name)
    assert [u.canonical for u in c.units] == units
    assert all(u.effect.value == "measure-config" for u in c.units)  # nothing excites
    assert check_profile(name).ok


def test_a_meter_with_exciting_functions_and_no_safe_action_is_warned(tmp_path: Path) -> None:
    report = check_profile(_variant(tmp_path, SAFE, ""))
    assert report.ok
    assert [f for f in report.findings if f.level is Level.WARNING
            and "emergency stop leaves it driving" in f.message]


@pytest.mark.parametrize("safe", ["""safe_action: {command: 'FUNC "VOLT",(@{ch})'}\n"""])
def test_a_meter_safe_action_per_channel_is_refused(tmp_path: Path, safe: str) -> None:
    report = check_profile(_variant(tmp_path, SAFE, safe))
    assert not report.ok
    assert any("excitation section" in f.message for f in report.findings), report
