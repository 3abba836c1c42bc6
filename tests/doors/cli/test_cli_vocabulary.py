"""Issue 19's CLI against a real server: global options anywhere, ids by prefix, ``show``
with everything the request page has, ``--json``, a requester's ``pending``, ``wait``'s
status line and exit codes, ``watch --timeout``, each thing said once; and the admin token
that a failed start does not use up.

The real ``bench-gate`` executable runs where a process proves something (its options as
a shell passes them, a pipe that is not a terminal); the rest calls ``main(argv)``."""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pyvisa

from bench_gate.auth import Tokens
from bench_gate.cli import main
from bench_gate.cli import parser as cli_parser
from bench_gate.store import open_store

from ..._http_bench import Bench, start_bench

EXE = str(Path(sys.executable).parent / "bench-gate")
CAMEL = re.compile(r"[a-z][a-zA-Z0-9]*")


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    # Two denials in a row suspend a run: the deny that does it must say so.
    yield from start_bench(tmp_path_factory.mktemp("vocab"), denials_in_a_row=2)


def held(bench: Bench, who: str, *commands: str) -> tuple[str, list[str]]:
    with bench.http(who) as h:
        run = h.post("/v1/runs", json={"kind": "script", "goal": "vocabulary"}).json()["id"]
        ids = []
        for command in commands:
            r = h.post(f"/v1/runs/{run}/scpi", json={
                "instrument": "psu", "command": command, "rationale": "the DUT needs it"})
            assert r.status_code == 202, r.text
            ids.append(r.json()["takeover"]["id"])
        return run, ids


def front_panel(bench: Bench, command: str) -> None:
    """A change made at the instrument itself (``SIM:PANEL``), not through the gateway."""
    rm = pyvisa.ResourceManager("@py")
    res: Any = rm.open_resource(bench.sim.psu_resource_name, read_termination="\n",
                                write_termination="\n")
    try:
        res.write("SIM:PANEL")
        res.write(command)
        assert res.query("*OPC?").strip() == "1"
    finally:
        res.close()


def exe(bench: Bench, who: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BENCH_GATE_TOKEN": bench.tokens[who], "BENCH_GATE_URL": "http://x"}
    return subprocess.run([EXE, *args], capture_output=True, text=True, env=env, timeout=60)


def run_main(bench: Bench, who: str, capsys: pytest.CaptureFixture[str], *argv: str
             ) -> tuple[int, str, str]:
    os.environ["BENCH_GATE_TOKEN"] = bench.tokens[who]
    try:
        code = main(["--url", bench.url, *argv])
    finally:
        del os.environ["BENCH_GATE_TOKEN"]
    out, err = capsys.readouterr()
    return code, out, err


def keys_of(value: Any, data: bool = False) -> Iterator[str]:
    """Every key that is a name (not inside a map keyed by data, like a snapshot)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not data:
                yield k
            yield from keys_of(v, data=k in {"snapshot", "proposed", "diff", "staleDiff",
                                               "before", "after", "readBack", "edits",
                                               "instruments", "channels"})
    elif isinstance(value, list):
        for v in value:
            yield from keys_of(v)


def test_the_real_executable(bench: Bench) -> None:
    """Global options after the command, JSON, a requester's own queue, a prefix, a piped
    wait that prints only its outcome, and every exit code in --help."""
    _, [mine] = held(bench, "bot", "VOLT 1.1,(@2)")
    _, [theirs] = held(bench, "bot2", "VOLT 1.2,(@2)")
    shown = exe(bench, "olga", "show", mine[:11], "--json", "--url", bench.url)
    assert shown.returncode == 0, shown.stderr
    tk = json.loads(shown.stdout)
    assert tk["id"] == mine and tk["handoff"]["rationale"] == "the DUT needs it"
    assert all(CAMEL.fullmatch(k) for k in keys_of(tk)), sorted(set(keys_of(tk)))
    queue = exe(bench, "bot", "--json", "--url", bench.url, "pending")
    assert queue.returncode == 0, queue.stderr
    ids = {t["id"] for t in json.loads(queue.stdout)}
    assert mine in ids and theirs not in ids  # its own, not a 403, and nobody else's
    waited = exe(bench, "bot", "wait", mine, "--timeout", "1", "--url", bench.url)
    assert waited.returncode == 8
    assert waited.stdout.splitlines() == [f"{mine}: pending"]  # piped: no status line
    helped = exe(bench, "bot", "wait", "--help")
    for code, word in [(0, "executed"), (3, "denied"), (4, "expired"), (5, "stale"),
                       (6, "failed or ambiguous"), (7, "cancelled"), (8, "timeout")]:
        assert re.search(rf"^\s+{code}\s+.*{word}", helped.stdout, re.M), (code, word)


def test_every_command_takes_the_global_options_after_it() -> None:
    parser = cli_parser()

    def leaves(p: argparse.ArgumentParser, path: tuple[str, ...]
               ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield path, p
        for action in subs:
            for name, child in action.choices.items():
                yield from leaves(child, (*path, name))

    found = list(leaves(parser, ()))
    assert len(found) > 20
    # Each takes exactly the global options it uses (a local command no --url/--token;
    # serve and mcp no --json: tests/doors/cli/test_cli_polish.py).
    local = {("serve",), ("token", "create"), ("token", "list"), ("token", "revoke"),
             ("journal", "verify"), ("journal", "export"), ("journal", "archive"),
             ("profile", "check"), ("profile", "test")}
    for path, leaf in found:
        takes = set(leaf._option_string_actions)
        assert ({"--url", "--token"} <= takes) is (path not in local), path
        assert ("--json" in takes) is (path not in {("serve",), ("mcp",)}), path
    args = parser.parse_args(["journal", "verify", "--json"])
    assert args.json is True
    args = parser.parse_args(["journal", "show", "RUN", "--url", "http://a", "--json",
                              "--token", "t"])
    assert (args.url, args.token, args.json) == ("http://a", "t", True)
    args = parser.parse_args(["--url", "http://b", "--json", "runs"])
    assert (args.url, args.json) == ("http://b", True)  # before it: kept, not reset


def test_every_approve_option_has_help() -> None:
    parser = cli_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    for name in ("approve", "deny", "show", "wait", "watch"):
        for action in commands[name]._actions:
            assert action.help, (name, action.dest)


def test_show_an_executed_request_says_each_thing_once(
        bench: Bench, capsys: pytest.CaptureFixture[str]) -> None:
    _, [tk] = held(bench, "bot", "VOLT 2.5,(@1)")
    run_main(bench, "olga", capsys, "show", tk[:12])  # a decision names what was shown
    code, out, _ = run_main(bench, "olga", capsys, "approve", tk[:12], "--setpoint",
                            "--notes", "fine for this DUT")
    assert code == 0
    last = out.strip().splitlines()[-1]
    assert last == f"{tk}: executed: VOLT 2.5,(@1)" and last.count("executed") == 1
    code, out, _ = run_main(bench, "olga", capsys, "show", tk, "--json")
    assert json.loads(out)["status"] == "executed"
    code, out, _ = run_main(bench, "olga", capsys, "--json", "show", tk)
    assert json.loads(out)["decidedAt"].endswith("Z")
    code, out, _ = run_main(bench, "olga", capsys, "show", tk)
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}
    assert "expires" not in lines and "missing" not in lines  # decided: no expiry
    assert lines["outcome"].split(None, 1)[1] == "executed: VOLT 2.5,(@1)"
    assert re.search(r"approved\s+setpoint by olga at \S+Z: fine for this DUT", out)
    assert re.search(r"read back\s+.*ch1\.voltage \S+ → 2\.5", out)
    assert re.search(r"margin\s+CH1 voltage 2\.500 V of limit 6\.000 V: margin 3\.500 V "
                     r"\(58%\)", out), out  # the console's words


def test_deny_that_suspends_the_run_says_so(bench: Bench,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    run, [first, second] = held(bench, "bot", "VOLT 1.3,(@3)", "VOLT 1.4,(@3)")
    run_main(bench, "olga", capsys, "show", first)
    run_main(bench, "olga", capsys, "show", second)
    code, out, _ = run_main(bench, "olga", capsys, "deny", first, "--notes", "not on this DUT")
    last = out.strip().splitlines()[-1]
    assert code == 0 and last == f"{first}: denied by olga: not on this DUT"
    code, out, _ = run_main(bench, "olga", capsys, "deny", second, "--notes", "not on this DUT")
    assert f"run {run} suspended after 2 denials in a row" in out
    code, out, _ = run_main(bench, "olga", capsys, "show", second)
    assert re.search(r"earlier\s+\S+Z  VOLT 1\.3,\(@3\)", out), out  # what the run did
    code, out, _ = run_main(bench, "bot", capsys, "wait", first, "--json")
    assert code == 3 and json.loads(out)["decidedBy"] == "olga"
    assert json.loads(out)["rationale"] == "the DUT needs it"
    code, out, _ = run_main(bench, "bot", capsys, "wait", first)
    assert code == 3 and out.strip() == f"{first}: denied by olga: not on this DUT"
    assert out.count("not on this DUT") == 1


def test_a_stale_request_shows_its_diff_and_its_fresh_request(
        bench: Bench, capsys: pytest.CaptureFixture[str]) -> None:
    _, [tk] = held(bench, "bot", "VOLT 1.7,(@2)")
    front_panel(bench, "CURR 0.3,(@2)")  # someone at the bench, after the request was made
    run_main(bench, "olga", capsys, "show", tk)
    code, out, _ = run_main(bench, "olga", capsys, "approve", tk, "--setpoint")
    assert code == 5, out
    fresh = re.search(r"fresh request: (tk-\S+)", out)
    assert fresh, out
    code, out, _ = run_main(bench, "olga", capsys, "show", fresh.group(1))
    assert re.search(rf"changed\s+CH2 current limit \S+ A → 0\.300 A \(since {tk} was approved",
                     out), out


def test_a_setpoint_edit_error_names_no_column(bench: Bench,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    _, [tk] = held(bench, "bot", "VOLT 1.8,(@1)")
    run_main(bench, "olga", capsys, "show", tk)
    code, _, err = run_main(bench, "olga", capsys, "approve", tk, "--setpoint", "--set",
                            "CH1.voltage=abc")
    assert code == 1 and "CH1.voltage='abc'" in err and "column" not in err


def test_a_prefix_that_is_not_unique_or_unknown(bench: Bench,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    held(bench, "bot", "VOLT 0.1,(@1)", "VOLT 0.2,(@1)")
    code, _, err = run_main(bench, "olga", capsys, "show", "tk-")
    assert code == 1 and "more than one request" in err and err.count("tk-") >= 3
    code, _, err = run_main(bench, "olga", capsys, "show", "tk-zzzz")
    assert code == 1 and "no request" in err and "tk-zzzz" in err
    # A requester's one request among many others' never stands for a short prefix: more
    # of its own may match beyond the ids read, and the others' are not listed.
    held(bench, "bot", *[f"VOLT 0.{i},(@1)" for i in range(1, 10)])
    _, [only] = held(bench, "bot2", "VOLT 0.3,(@2)")
    with bench.http("bot2") as h:
        r = h.get("/v1/takeover/tk-")
        assert r.status_code == 422 and "give more of the id" in r.json()["reason"]
        assert set(re.findall(r"tk-[0-9a-f-]{36}", r.json()["reason"])) <= {
            t["id"] for t in h.get("/v1/takeover").json()}
        assert h.get(f"/v1/takeover/{only[:13]}").json()["id"] == only


def test_wait_on_a_terminal_shows_a_status_line(
        bench: Bench, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    _, [tk] = held(bench, "bot", "OUTP ON,(@1)")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code, out, _ = run_main(bench, "bot", capsys, "wait", tk, "--timeout", "1.5")
    assert code == 8
    assert re.search(rf"\r\x1b\[K{tk}: pending; given none; missing [a-z_, ]*output_enable; "
                     r"\d+m\d\ds left", out), repr(out)


def test_watch_stops_at_its_timeout_and_names_the_command(
        bench: Bench, capsys: pytest.CaptureFixture[str]) -> None:
    later = threading.Timer(1.0, held, (bench, "bot", "VOLT 0.9,(@1)"))
    later.start()
    started = time.monotonic()
    code, out, _ = run_main(bench, "olga", capsys, "watch", "--timeout", "3")
    later.join()
    assert code == 0 and 3 <= time.monotonic() - started < 15
    assert re.search(r"request  tk-\S+  pending\s+psu  VOLT 0\.9,\(@1\)  \(run run-", out), out


def test_a_failed_start_uses_no_admin_token(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "fresh.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        code = main(["serve", "--db", str(db), "--port", str(taken.getsockname()[1]),
                     "--sim-psu-port", "0", "--sim-dmm-port", "0", "--door", "psu=0",
                     "--door", "dmm=0"])
    err = capsys.readouterr().err
    assert code == 1 and "--port" in err and "Traceback" not in err
    store = open_store(db)
    try:
        assert not Tokens(store).any(), "the failed start created the one-time admin token"
    finally:
        store.close()


def test_an_energize_shows_the_setpoint_approval_it_stands_on(
        bench: Bench, capsys: pytest.CaptureFixture[str]) -> None:
    _, [volts] = held(bench, "bot", "VOLT 1.2,(@1)")
    run_main(bench, "olga", capsys, "show", volts)
    code, _, err = run_main(bench, "olga", capsys, "approve", volts, "--setpoint")
    assert code == 0, err
    _, [on] = held(bench, "bot", "OUTP ON,(@1)")
    code, out, _ = run_main(bench, "olga", capsys, "show", on)
    assert re.search(rf"setpoint\s+CH1 voltage 1\.200 V approved by olga at \S+Z in {volts}",
                     out), out
    assert "needs a setpoint approval too" not in out
    front_panel(bench, "CURR 0.2,(@2)")  # CH2: within the envelope, no approved setpoint
    _, [bare] = held(bench, "bot", "OUTP ON,(@2)")
    code, out, _ = run_main(bench, "olga", capsys, "show", bare)
    assert re.search(r"setpoint\s+CH2 has no approved setpoint in force: this request needs "
                     r"a setpoint approval too", out), out


def test_an_expiry_that_suspends_the_run_says_so(bench: Bench,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    run, [first, second] = held(bench, "bot", "VOLT 0.4,(@1)", "VOLT 0.5,(@1)")
    bench.clock.advance(minutes=31)  # an expiry counts as a denial
    code, out, _ = run_main(bench, "bot", capsys, "wait", second, "--timeout", "20")
    assert code == 4, out
    code, out, _ = run_main(bench, "bot", capsys, "wait", first, "--timeout", "20")
    outcomes = {first: "", second: ""}
    for tk in outcomes:
        code, out, _ = run_main(bench, "bot", capsys, "show", tk, "--json")
        outcomes[tk] = json.loads(out)["outcome"]
    assert [o.count(f"run {run} suspended after 2 denials in a row")
            for o in outcomes.values()].count(1) == 1, outcomes
