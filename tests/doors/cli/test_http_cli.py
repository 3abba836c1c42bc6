"""The CLI against a real server (in-process through ``main(argv)``, and as the real
executable with its token in BENCH_GATE_TOKEN), and `bench-gate serve` itself."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ..._cli import cli as run_cli
from ..._http_bench import Bench, start_bench, suspended_run


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("cli"))


def cli(bench: Bench, who: str | None, *args: str, real: bool = False
        ) -> subprocess.CompletedProcess[str]:
    """``bench-gate --url URL ARGS`` as ``who`` (None: no token). ``real``: the executable,
    its token in BENCH_GATE_TOKEN; else in-process, the token as ``--token``."""
    if real:
        env = {k: v for k, v in os.environ.items() if k != "BENCH_GATE_TOKEN"}
        if who:
            env["BENCH_GATE_TOKEN"] = bench.tokens[who]
        return run_cli("--url", bench.url, *args, real=True, env=env)
    token = ["--token", bench.tokens[who]] if who else []
    saved = os.environ.pop("BENCH_GATE_TOKEN", None)  # None means no token at all
    try:
        return run_cli("--url", bench.url, *token, *args)
    finally:
        if saved is not None:
            os.environ["BENCH_GATE_TOKEN"] = saved


def held(bench: Bench, command: str) -> tuple[str, str]:
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "script"}).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu", "command": command})
        return run, r.json()["takeover"]["id"]


def test_pending_show_approve(bench: Bench) -> None:
    run, tk = held(bench, "VOLT 3.3,(@1)")
    p = cli(bench, "olga", "pending")
    assert p.returncode == 0 and tk in p.stdout and "setpoint" in p.stdout
    s = cli(bench, "olga", "show", tk)
    assert s.returncode == 0 and "CH1 voltage setpoint" in s.stdout
    a = cli(bench, "olga", "approve", tk, "--setpoint", "--set", "CH1.voltage=3.2",
            "--notes", "a bit lower")
    assert a.returncode == 0, a.stderr
    assert "executed" in a.stdout
    assert bench.psu("VOLT? (@1)").startswith("+3.2")
    w = cli(bench, "bot", "wait", tk)
    assert w.returncode == 0
    j = cli(bench, "bot", "journal", run)
    assert "step_completed" in j.stdout
    assert run in cli(bench, "olga", "runs").stdout


def test_deny_and_wait_exit_code(bench: Bench) -> None:
    _, tk = held(bench, "VOLT 2.2,(@1)")
    assert cli(bench, "olga", "show", tk).returncode == 0
    d = cli(bench, "olga", "deny", tk, "--notes", "not today", real=True)
    assert d.returncode == 0 and "denied" in d.stdout
    w = cli(bench, "bot", "wait", tk, real=True)  # the exit code as a shell sees it
    assert w.returncode == 3 and "not today" in w.stdout


def test_wait_timeout_and_expiry(bench: Bench) -> None:
    _, tk = held(bench, "VOLT 1.1,(@1)")
    w = cli(bench, "bot", "wait", tk, "--timeout", "1")
    assert w.returncode == 8
    bench.clock.advance(minutes=31)
    w = cli(bench, "bot", "wait", tk, "--timeout", "10")
    assert w.returncode == 4 and "expired" in w.stdout


def test_clear_errors_no_tracebacks(bench: Bench) -> None:
    _, tk = held(bench, "VOLT 1.2,(@1)")
    assert cli(bench, "bot", "show", tk).returncode == 0  # its own request: shown
    cases = [cli(bench, None, "pending"), cli(bench, "bot", "approve", tk, "--setpoint"),
             cli(bench, "olga", "approve", tk), cli(bench, "olga", "show", "tk-nope")]
    bad = subprocess.run([sys.executable, "-m", "bench_gate.cli", "--url",
                          "http://127.0.0.1:9", "--token", "x", "runs"],
                         capture_output=True, text=True, timeout=30)
    for r in [*cases, bad]:
        assert r.returncode == 1, r
        assert "Traceback" not in r.stderr and r.stderr.startswith("bench-gate: ")
    assert "403" in cases[1].stderr and "operator" in cases[1].stderr


def test_release_of_their_own_suspended_run_exits_1_with_why(bench: Bench) -> None:
    run, _ = suspended_run(bench, "olga", "oscar")
    r = cli(bench, "olga", "release", run)
    assert r.returncode == 1 and "other than its requester" in r.stderr, r
    assert "Traceback" not in r.stderr
    ok = cli(bench, "oscar", "release", run)
    assert ok.returncode == 0 and f"{run}: active" in ok.stdout, ok


def test_watch_shows_changes(bench: Bench) -> None:
    env = {**os.environ, "BENCH_GATE_TOKEN": bench.tokens["olga"]}
    proc = subprocess.Popen([sys.executable, "-m", "bench_gate.cli", "--url", bench.url,
                             "watch"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        assert "watching" in proc.stdout.readline()
        time.sleep(0.5)
        _, tk = held(bench, "VOLT 1.3,(@1)")
        lines = [proc.stdout.readline() for _ in range(2)]
        assert any(tk in line and "pending" in line for line in lines), lines
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)


def serving(db: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """``bench-gate serve`` on free ports, and what it printed up to ``Ctrl-C stops``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench_gate.cli", "serve", "--port", "0", "--db", str(db),
         "--sim-psu-port", "0", "--sim-dmm-port", "0", "--door", "psu=0", "--door", "dmm=0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    out = ""
    while "Ctrl-C" not in out:
        line = proc.stdout.readline()
        if not line:
            proc.kill()
            raise AssertionError(proc.stderr.read() if proc.stderr else "serve ended")
        out += line
    return proc, out


def test_serve_and_token_commands(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    env = {**os.environ, "BENCH_GATE_HOME": str(tmp_path)}
    proc, out = serving(db, env)
    try:
        url = re.search(r"http://127\.0\.0\.1:\d+", out)
        token = re.search(r"BENCH_GATE_TOKEN=(bg_\S+)", out)
        assert url and token and "psu" in out and "e36312a" in out
        # The token commands in-process (tests/core/test_token_names.py runs the executable).
        made = run_cli("token", "create", "--name", "alice", "--role", "operator", "--db",
                       str(db))
        alice = made.stdout.strip().splitlines()[-1]
        assert alice.startswith("bg_")
        r = httpx.get(url.group(0) + "/v1/takeover", headers={
            "Authorization": f"Bearer {alice}"})
        assert r.status_code == 200
        listed = run_cli("token", "list", "--db", str(db))
        assert "alice" in listed.stdout and "admin" in listed.stdout and "bg_" not in \
            listed.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(20)
    assert proc.returncode == 0
    # Served again on the same store: no second one-time token, and the way to a new admin.
    again, out = serving(db, env)
    again.send_signal(signal.SIGINT)
    again.wait(20)
    assert "BENCH_GATE_TOKEN=" not in out
    assert f"bench-gate token create --name YOUR-NAME --role admin --db {db}" in out
