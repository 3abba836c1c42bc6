"""The test engineer's CLI says what is true, in every command, before anything else: a
refused decision never reads as one happening, ``--json`` is JSON everywhere it is taken,
each help lists exactly what its command takes, bad arguments are usage errors before
anything is sent, a refused command is shown as refused, and what is shown of an
instrument is what bench.toml says and what answers."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..._cli import cli as run_cli
from ..._http_bench import Bench, start_bench


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("polish"))


def cli(bench: Bench, who: str | None, *args: str):  # type: ignore[no-untyped-def]
    token = ["--token", bench.tokens[who]] if who else []
    saved = os.environ.pop("BENCH_GATE_TOKEN", None)
    try:
        return run_cli("--url", bench.url, *token, *args)
    finally:
        if saved is not None:
            os.environ["BENCH_GATE_TOKEN"] = saved


def held(bench: Bench, command: str, who: str = "bot") -> tuple[str, str]:
    with bench.http(who) as h:
        run = h.post("/v1/runs", json={"kind": "script"}).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu", "command": command})
        return run, r.json()["takeover"]["id"]


# ------------------------------------------------------------- 1. a refused decision
@pytest.mark.parametrize("decision", [["approve", "--setpoint"], ["deny", "--notes", "no"]])
def test_a_decision_the_server_refuses_never_prints_as_happening(
        bench: Bench, decision: list[str]) -> None:
    _, tk = held(bench, "VOLT 1.4,(@1)")
    assert cli(bench, "bot", "show", tk).returncode == 0  # its own: shown, so remembered
    r = cli(bench, "bot", decision[0], tk, *decision[1:])
    assert r.returncode == 1 and "403" in r.stderr, r
    assert r.stdout == "", r.stdout  # no "approving setpoint:" and no summary
    assert bench.psu("VOLT? (@1)") != "+1.400000E+00"
    ok = cli(bench, "olga", "show", tk)
    assert ok.returncode == 0 and "PENDING" in ok.stdout


# ------------------------------------------------------------- 2. --json is JSON
def test_every_command_that_takes_json_prints_json(bench: Bench) -> None:
    db = str(bench.db)
    made = run_cli("token", "create", "--name", "jason", "--role", "operator", "--db", db,
                   "--json")
    assert made.returncode == 0, made
    record = json.loads(made.stdout)
    assert record["name"] == "jason" and record["token"].startswith("bg_")
    listed = json.loads(run_cli("--json", "token", "list", "--db", db).stdout)
    assert record["id"] in [r["id"] for r in listed]
    assert all("token" not in r for r in listed)  # never a secret
    gone = json.loads(run_cli("token", "revoke", record["id"], "--db", db, "--json").stdout)
    assert gone == {"revoked": 1, "madeWithIt": []}
    checked = run_cli("profile", "check", "e36312a", "--json")
    assert checked.returncode == 0 and json.loads(checked.stdout)["profile"] == "e36312a"
    tested = run_cli("profile", "test", "e36312a", "--sim", "--json", "--timeout", "2000")
    found = json.loads(tested.stdout)
    assert tested.returncode == 0 and found["sent"] == found["answered"] > 0, tested
    later = threading.Timer(1.0, held, (bench, "VOLT 0.7,(@1)"))
    later.start()
    watched = cli(bench, "olga", "watch", "--timeout", "3", "--json")
    later.join()
    events = [json.loads(line) for line in watched.stdout.splitlines()]
    assert watched.returncode == 0 and any(e["type"] == "request" for e in events), watched


@pytest.mark.parametrize("args", [["serve", "--json", "--config", "/nonexistent/bench.toml"],
                                  ["--json", "serve", "--config", "/nonexistent/bench.toml"],
                                  ["mcp", "--json"], ["--json", "mcp"]])
def test_a_command_without_json_refuses_the_flag(args: list[str]) -> None:
    r = run_cli("--url", "http://127.0.0.1:9", "--token", "x", *args)  # nothing served
    assert r.returncode == 2 and "--json" in r.stderr and r.stdout == "", r


# ------------------------------------------------------------- 3. each help, exactly
@pytest.mark.parametrize(("command", "has", "lacks"), [
    (["token", "create"], ["--db", "--json"], ["--url", "--token"]),
    (["token", "list"], ["--db", "--json"], ["--url", "--token"]),
    (["token", "revoke"], ["--db", "--json"], ["--url", "--token"]),
    (["profile", "check"], ["--json"], ["--url", "--token"]),
    (["journal", "verify"], ["--db", "--json"], ["--url", "--token"]),
    (["serve"], ["--db"], ["--url", "--token", "--json"]),
    (["mcp"], ["--url", "--token"], ["--json"]),
    (["pending"], ["--url", "--token", "--json"], ["--db"]),
])
def test_each_help_lists_exactly_what_its_command_takes(
        command: list[str], has: list[str], lacks: list[str]) -> None:
    r = run_cli(*command, "--help")
    assert r.returncode == 0
    for option in has:
        assert f"  {option}" in r.stdout, (command, option)
    for option in lacks:
        assert f"  {option}" not in r.stdout and f"[{option}" not in r.stdout, (command, option)


# ------------------------------------------------------------- 4. usage errors
@pytest.mark.parametrize("args", [
    ["mcp", "--heartbeat-seconds", "1"], ["mcp", "--heartbeat-seconds", "2.5"],
    ["mcp", "--heartbeat-seconds", "86401"], ["pending", "--limit", "0"],
    ["pending", "--limit", "1001"], ["pending", "--offset", "-1"],
])
def test_a_bad_argument_is_a_usage_error_before_anything_is_sent(
        bench: Bench, args: list[str]) -> None:
    r = cli(bench, "olga", *args)
    assert r.returncode == 2, r
    assert r.stderr.strip().splitlines()[-1].startswith(f"bench-gate {args[0]}: error: ")


# ------------------------------------------------------------- 5. a refused command
def test_the_handoff_shows_a_refused_command_as_refused_and_why(bench: Bench) -> None:
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "script"}).json()["id"]
        no = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                  "command": "VOLT 99,(@1)"})
        assert no.status_code >= 400 or no.json().get("outcome") == "refused", no.text
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                 "command": "VOLT 1.6,(@1)"})
        tk = r.json()["takeover"]["id"]
    s = cli(bench, "olga", "show", tk)
    earlier = [line for line in s.stdout.splitlines() if "VOLT 99" in line]
    assert len(earlier) == 1 and "refused: -222" in earlier[0], s.stdout
    assert "is outside 0.0 to 6.0 V" in earlier[0], earlier


# ------------------------------------------------------------- 6. status and the banner
def _dead_port() -> int:
    with socket.socket() as s:  # bound, never listening, closed: nothing answers there
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_status_and_the_banner_say_an_instrument_is_unreachable_and_name_its_profile(
        tmp_path: Path) -> None:
    import bench_gate

    path = Path(bench_gate.__file__).parent / "profiles" / "e36312a.yaml"
    dead = f"TCPIP0::127.0.0.1::{_dead_port()}::SOCKET"
    (tmp_path / "bench.toml").write_text(
        f'bench = "polish"\n[[instruments]]\nname = "psu"\nresource = "{dead}"\n'
        f'profile = "{path}"\ntimeout_ms = 1000\n')
    env = {**os.environ, "BENCH_GATE_HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench_gate.cli", "serve", "--port", "0", "--config",
         str(tmp_path / "bench.toml"), "--db", str(tmp_path / "s.db")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        out = ""
        for _ in range(60):
            line = proc.stdout.readline()
            if not line or "Ctrl-C" in line:
                break
            out += line
        assert re.search(rf"    psu  e36312a  {re.escape(dead)}  no socket door", out), out
        assert "WARNING unreachable:" in out, out
        url = re.search(r"http://127\.0\.0\.1:\d+", out)
        token = re.search(r"BENCH_GATE_TOKEN=(bg_\S+)", out)
        assert url and token, out
        s = run_cli("--url", url.group(0), "--token", token.group(1), "status")
        assert s.returncode == 0, s
        assert re.search(rf"psu\s+e36312a\s+{re.escape(dead)}\s+.*UNREACHABLE", s.stdout), \
            s.stdout
        assert "WARNING psu: unreachable:" in s.stdout and str(path) not in s.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


# ------------------------------------------------------------- 7. stop, as configured
def test_stop_names_each_instrument_with_the_resource_bench_toml_gives(bench: Bench) -> None:
    with bench.http("olga") as h:
        configured = {i["name"]: i["resource"] for i in h.get("/v1/instruments").json()}
    try:
        r = cli(bench, "olga", "stop")
        assert r.returncode == 0, r
        for name, resource in configured.items():
            assert f"{name} ({resource}): sent" in r.stdout, r.stdout
        with bench.http("olga") as h:
            stopped = h.get("/v1/bench/stop").json()["stopped"]
        assert {n: s["resource"] for n, s in stopped.items()} == configured
    finally:
        assert cli(bench, "olga", "stop", "--clear").returncode == 0


def test_status_says_an_instrument_answers_as_another_model(tmp_path: Path) -> None:
    from bench_gate.auth import Tokens
    from bench_gate.config import default_config
    from bench_gate.server import ServerThread
    from bench_gate.store import open_store
    from sim_instruments import SimBenchThread, SimServedThread

    with SimBenchThread() as sim, SimServedThread("dp832") as dp832:
        config = default_config(sim.psu_port, sim.dmm_port)
        config.instruments[0].resource = dp832.resource_name  # a swapped cable
        for ic in config.instruments:
            ic.socket_port = 0
        store = open_store(tmp_path / "bench.db")
        token = Tokens(store).create("olga", "operator")[1]
        server = ServerThread(config, store)
        try:
            # Asked once (a read), as any first message to it does: now it is known.
            with server_http(server.url, token) as h:
                run = h.post("/v1/runs", json={"kind": "script"}).json()["id"]
                h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                     "command": "VOLT? (@1)"})
            s = run_cli("--url", server.url, "--token", token, "status")
        finally:
            server.close()
            store.close()
    assert s.returncode == 0, s
    assert re.search(r"^psu\s+e36312a\s+\S+\s+.*ANOTHER MODEL$", s.stdout, re.M), s.stdout
    assert "WARNING psu: another instrument answers:" in s.stdout and "DP832" in s.stdout


def server_http(url: str, token: str):  # type: ignore[no-untyped-def]
    import httpx

    return httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {token}"})
