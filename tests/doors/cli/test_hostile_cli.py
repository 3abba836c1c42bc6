"""The CLI under bad input: every failure is one line on stderr and a non-zero exit, never a
traceback, whatever the server URL, the id or the numbers given."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench_gate.client import ApiError, Client

from ..._cli import cli

#: URLs that cannot even be parsed: a port that is no number, an unclosed or bad IPv6
#: bracket, two ports. (A URL that parses but leads nowhere is "cannot reach", tested in
#: test_http_cli.)
MALFORMED = ["http://[::1", "http://127.0.0.1:port", "http://[zz]:80", "http://h:80:80"]


@pytest.mark.parametrize("url", MALFORMED)
def test_a_malformed_server_url_is_one_line_and_exit_1(url: str) -> None:
    for command in (["pending"], ["show", "tk-1"], ["wait", "tk-1", "--timeout", "1"],
                    ["approve", "tk-1", "--setpoint"], ["watch", "--timeout", "1"]):
        r = cli("--url", url, "--token", "bg_x", *command)
        assert r.returncode == 1, (command, r)
        assert "Traceback" not in r.stderr and r.stderr.startswith("bench-gate: "), r.stderr
        assert r.stderr.count("\n") == 1 and "not a server URL" in r.stderr, r.stderr


def test_a_malformed_url_from_the_environment_through_the_real_executable() -> None:
    import os
    r = cli("runs", real=True, timeout=60,
            env={**os.environ, "BENCH_GATE_URL": MALFORMED[0], "BENCH_GATE_TOKEN": "bg_x"})
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("bench-gate: ") and "not a server URL" in r.stderr


def test_the_client_refuses_a_malformed_url_as_an_api_error() -> None:
    for url in MALFORMED:
        with pytest.raises(ApiError, match="not a server URL"):
            Client(url, "bg_x")


@pytest.mark.parametrize("numbers", [
    ["--voltage", "nan", "5", "--current-max", "1"],
    ["--voltage", "0", "inf", "--current-max", "1"],
    ["--voltage", "0", "5", "--current-max", "1e400"],
    ["--voltage", "0", "5", "--current-max", "1", "--max-step=-inf"],
])
def test_a_number_that_is_not_finite_is_a_usage_error(numbers: list[str]) -> None:
    """argparse's float takes nan, inf and 1e400 (inf): the JSON encoder then raised
    ValueError with a traceback; now a usage error naming the option, exit 2, before any
    request."""
    r = cli("--url", "http://127.0.0.1:9", "--token", "bg_x", "plan", "request", "run-1",
            "--instrument", "psu", "--channels", "1", "--max-writes", "1", *numbers)
    assert r.returncode == 2, r
    assert "Traceback" not in r.stderr and "finite" in r.stderr, r.stderr
    assert any(v in r.stderr for v in ("nan", "inf", "1e400")), r.stderr


@pytest.mark.parametrize(("command", "value"), [
    (["wait", "tk-1"], "nan"), (["wait", "tk-1"], "-5"), (["watch"], "nan"),
    (["watch"], "-1")])
def test_a_timeout_that_is_no_duration_is_a_usage_error(command: list[str], value: str) -> None:
    r = cli("--url", "http://127.0.0.1:9", "--token", "bg_x", *command, "--timeout", value)
    assert r.returncode == 2, r
    assert "Traceback" not in r.stderr and "--timeout" in r.stderr, r.stderr


@pytest.mark.parametrize("option", ["--port=99999999", "--port=-1", "--sim-psu-port=70000",
                                    "--sim-dmm-port=-5", "--port=http"])
def test_serve_with_a_port_that_is_no_port_is_a_usage_error(option: str,
                                                            tmp_path: Path) -> None:
    """bind() raised OverflowError with a traceback, after the simulated bench and the store
    were started; now argparse refuses it (exit 2) before anything starts."""
    r = cli("serve", "--db", str(tmp_path / "bench.db"), option)
    assert r.returncode == 2, r
    assert "Traceback" not in r.stderr and option.partition("=")[0] in r.stderr, r.stderr
    assert not (tmp_path / "bench.db").exists()


@pytest.mark.parametrize("days", ["999999999999999", "-1", "0", "ten"])
def test_journal_archive_keep_days_out_of_range_is_a_usage_error(days: str,
                                                                 tmp_path: Path) -> None:
    """--keep-days 999999999999999 raised OverflowError with a traceback; -1 archived every
    event (older than tomorrow); 0 fell back to the config's. Nothing is archived."""
    r = cli("journal", "archive", "--db", str(tmp_path / "none.db"), f"--keep-days={days}")
    assert r.returncode == 2, r
    assert "Traceback" not in r.stderr and "--keep-days" in r.stderr, r.stderr


def test_a_bench_toml_keep_days_beyond_any_date_is_refused_at_load(tmp_path: Path) -> None:
    from bench_gate.config import load_config
    from bench_gate.errors import InvalidInput

    config = tmp_path / "bench.toml"
    config.write_text('bench = "b"\n[journal]\nkeep_days = 1000000000\n')
    with pytest.raises(InvalidInput, match="keep_days"):
        load_config(str(config))


@pytest.mark.parametrize("command", [["token", "list"], ["journal", "verify"],
                                     ["token", "create", "--name", "x", "--role", "admin"]])
def test_a_store_that_is_not_there_makes_no_directory(tmp_path: Path,
                                                      command: list[str]) -> None:
    """``--db`` naming no store (a typo, a host:port pasted for a URL) is one line, exit 1,
    and leaves nothing behind: its parent directory was made before the store was looked
    for."""
    db = tmp_path / "typo" / "bench-gate.db"
    done = cli(*command, "--db", str(db))
    assert done.returncode == 1 and done.stderr.startswith("bench-gate: no store at "), done
    assert not (tmp_path / "typo").exists()
