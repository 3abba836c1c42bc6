"""Configuration files, the store's schema, and the request state table."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench_gate import states
from bench_gate.config import load_config
from bench_gate.errors import InvalidInput
from bench_gate.models import Status
from bench_gate.store import MIGRATIONS, SqliteStore

GOOD = """
bench = "bench-3"
[[instruments]]
name = "psu"
resource = "TCPIP0::192.168.1.20::inst0::INSTR"
profile = "e36312a"
socket_port = 5025
[envelope.psu.1]
voltage = 5.5
current = 0.5
[policy]
output_off_is_safe = true
"""


def test_good_config(tmp_path: Path) -> None:
    path = tmp_path / "bench.toml"
    path.write_text(GOOD)
    config = load_config(path)
    assert config.instruments[0].resource.startswith("TCPIP0::192.168.1.20")
    assert str(config.envelope["psu"][1].voltage) == "5.5"
    assert config.policy.output_off_is_safe


@pytest.mark.parametrize(("text", "problem"), [
    (GOOD.replace('profile = "e36312a"', ""), "instruments.0.profile: Field required"),
    (GOOD.replace("voltage = 5.5", 'voltage = "lots"'), "envelope.psu.1.voltage"),
    (GOOD + "\n[server]\nport = 99999\n", "server.port"),
    (GOOD.replace("[policy]", "[policy]\ncolour = 1"), "policy.colour: Extra inputs"),
    (GOOD.replace("[envelope.psu.1]", "[envelope.scope.1]"), "unknown instruments"),
    ("bench = [", "not valid TOML"),
])
def test_bad_config_names_the_key(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bench.toml"
    path.write_text(text)
    with pytest.raises(InvalidInput, match=problem.replace(".", r"\.")):
        load_config(path)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot read"):
        load_config(tmp_path / "nope.toml")


def test_store_schema_is_versioned(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    assert store.schema_version() == len(MIGRATIONS)
    store.close()
    again = SqliteStore(tmp_path / "s.db")  # reopening migrates nothing twice
    assert again.schema_version() == len(MIGRATIONS)
    again.close()


def test_state_table_is_sound() -> None:
    states.check_table()
    assert states.target(Status.PENDING, states.Event.APPROVE) is Status.APPROVED
    assert states.target(Status.DENIED, states.Event.APPROVE) is None
    for status in states.TERMINAL:
        assert all(states.target(status, e) is None for e in states.Event)


def test_state_table_check_catches_a_bad_table(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = dict(states.TRANSITIONS)
    bad[(Status.DENIED, states.Event.APPROVE)] = Status.APPROVED
    monkeypatch.setattr(states, "TRANSITIONS", bad)
    with pytest.raises(AssertionError, match="terminal statuses with exits"):
        states.check_table()
    cut = {k: v for k, v in states.TRANSITIONS.items() if v is not Status.STALE}
    monkeypatch.setattr(states, "TRANSITIONS", cut)
    with pytest.raises(AssertionError, match="unreachable"):
        states.check_table()
