"""``bench-gate profile check`` and ``bench-gate profile test``: every shipped profile checks
clean and has every query it passes answered by its simulator served on 127.0.0.1; a lab's
broken profile is reported, header by header."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench_gate.cli import main
from bench_gate.scpi import available_profiles, classify
from sim_instruments import EXTRA, SimBenchThread

#: The simulated instrument that plays each shipped profile (the generic one: the supply).
PLAYED_BY = {"e36312a": "psu", "34465a": "dmm", "generic": "psu", "k2450": "smu",
             "dmm6500": "dmm6500", "e3631a": "e3631a", "dl3021": "dl3021", "dp832": "dp832",
             "spd3303x": "spd3303x"}


@pytest.fixture(scope="module")
def bench() -> Iterator[SimBenchThread]:
    with SimBenchThread() as sim:
        yield sim


def test_every_shipped_profile_has_a_simulator() -> None:
    assert set(available_profiles()) == set(PLAYED_BY)


@pytest.mark.parametrize("profile", sorted(PLAYED_BY))
def test_every_shipped_profile_checks_clean(profile: str, capsys: pytest.CaptureFixture[str]
                                            ) -> None:
    path = Path("bench_gate/profiles") / f"{profile}.yaml"
    assert main(["profile", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "0 error(s)" in out and "error:" not in out


@pytest.mark.parametrize("profile", sorted(PLAYED_BY))
def test_every_query_a_shipped_profile_passes_is_answered_over_lan(
        bench: SimBenchThread, profile: str, capsys: pytest.CaptureFixture[str]) -> None:
    resource = bench.psu_resource_name if PLAYED_BY[profile] == "psu" else \
        bench.dmm_resource_name
    # An instrument simulated on its own (sim_instruments.EXTRA): --sim serves it.
    where = ["--sim"] if PLAYED_BY[profile] in EXTRA else ["--resource", resource]
    assert main(["profile", "test", profile, *where, "--passing", "--timeout", "2000"]) == 0
    out = capsys.readouterr().out
    assert "unanswered" not in out
    assert ", 0 not" in out


LAB_METER = """\
name: lab-meter
title: A lab's meter
kind: meter
complete: true
commands:
  - header: "*IDN"
    query: {effect: read}
  - header: "CONFigure:RESistance"
    set: {effect: measure-config}
  - header: "READ"
    query: {effect: read}
  - header: "FOO:BAR"
    query: {effect: read}
"""

LAB_SUPPLY = """\
name: lab-supply
title: A lab's supply
kind: supply
channels:
  1: {names: [CH1], ranges: {voltage: [0, 10]}}
fields:
  voltage: {label: voltage setpoint, unit: V, query: "VOLT? (@{ch})", default: 0}
  current: {label: current limit, unit: A, query: "CURR? (@{ch})", default: 1}
commands:
  - header: "*IDN"
    query: {effect: read}
  - header: "VOLTage"
    set: {effect: setpoint, field: voltage, channel: list,
          params: [{name: v, type: number, field: voltage}]}
  - header: "CURRent"
    set: {effect: setpoint, field: current, channel: list,
          params: [{name: i, type: number, field: current}]}
    query: {effect: read, channel: none}
"""


def test_a_broken_profile_is_reported_header_by_header(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meter = tmp_path / "lab-meter.yaml"
    meter.write_text(LAB_METER, encoding="utf-8")
    assert main(["profile", "check", str(meter)]) == 1
    out = capsys.readouterr().out
    assert "error: CONFigure:RESistance: CONF:RES drives current into the DUT, but its " \
           "effect is measure-config, not excites" in out
    assert "missing the IEEE 488.2 and SCPI-99 mandatory *CLS" in out
    supply = tmp_path / "lab-supply.yaml"
    supply.write_text(LAB_SUPPLY, encoding="utf-8")
    assert main(["profile", "check", str(supply)]) == 1
    out = capsys.readouterr().out
    assert "a supply without a safe_action" in out
    assert "a supply with no output form" in out
    assert "CURRent: i takes the field 'current', which has no range on channel(s) 1" in out
    assert "the command names its channel by list, the query by none" not in out  # none: ok
    assert "warning: VOLTage: a setpoint with no query: nobody can read it back" in out
    assert "channel: list without a select_query" in out


def test_a_query_the_instrument_does_not_answer_is_reported(
        bench: SimBenchThread, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A profile's name is its own in a process: this one is not the file checked above.
    meter = tmp_path / "walked-meter.yaml"
    meter.write_text(LAB_METER.replace("lab-meter", "walked-meter"), encoding="utf-8")
    code = main(["profile", "test", str(meter), "--resource", bench.dmm_resource_name,
                 "--timeout", "300"])
    out = capsys.readouterr().out
    assert code == 1
    assert "unanswered: FOO:BAR?: no answer" in out
    assert "walked-meter: 3 read-only queries sent, 2 answered, 1 not" in out
    # Once its file is loaded, a lab's profile is classified by its name, as the gateway does.
    assert classify("READ?", "walked-meter").read_only


def test_an_instrument_that_is_not_there_is_one_line(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    """``profile test --resource`` on an address where nothing listens: pyvisa-py connects
    on the first write, and its ConnectionRefusedError came out as a traceback."""
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    name = f"TCPIP0::127.0.0.1::{port}::SOCKET"
    code = main(["profile", "test", "e36312a", "--resource", name, "--timeout", "2000"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip() == f"bench-gate: cannot reach '{name}': Connection refused"


def test_another_model_is_not_walked(bench: SimBenchThread,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The supply's profile pointed at the meter: its "read-only" queries are another
    model's (one model's read may change another's state), so none is sent; both named."""
    code = main(["profile", "test", "e36312a", "--resource", bench.dmm_resource_name,
                 "--timeout", "2000"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "Keysight Technologies,34465A" in err and "'Keysight Technologies,E36312A'" in err
    assert "no query was sent" in err and "read-only queries sent" not in out
