"""What a terminal shows is what the server holds, against a real server:

1. ``pending`` cut a command at 40 characters with no mark: 'CURR 0.1,(@1);CURR 0.25,(@2);
   *OPC;VOLT 12,(@2)' read '...;*OPC;VOLT 1', a whole-looking command at 1 V. It keeps
   whole units and says how many more there are.
2. A line break in free text printed on a line of its own, so it read as a line the server
   never sent: a run's goal as a row of ``runs``, a close reason as an event of ``journal``
   (an approval nobody gave), a question's text as one of its options, a denial note as a
   second outcome line. Each of those is one line, the break escaped (``\\u000a``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import pyvisa

from ..._cli import cli
from ..._http_bench import Bench, shown_hash, start_bench


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("cli-one-line"))


def run_of(bench: Bench, goal: str) -> str:
    with bench.http("bot") as h:
        r = h.post("/v1/runs", json={"kind": "script", "goal": goal})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])


def as_olga(bench: Bench, *args: str) -> list[str]:
    done = cli("--url", bench.url, "--token", bench.tokens["olga"], *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_pending_never_cuts_a_command_silently(bench: Bench) -> None:
    run = run_of(bench, "two rails")
    command = "CURR 0.1,(@1);CURR 0.25,(@2);*OPC;VOLT 12,(@2)"
    with bench.http("bot") as h:
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu", "command": command})
        assert r.status_code == 202, r.text
        tk = r.json()["takeover"]["id"]
    row = next(line for line in as_olga(bench, "pending") if line.startswith(tk))
    assert "VOLT 1" not in row  # never the 12 V cut to a 1 V that looks whole
    assert "CURR 0.1,(@1);CURR 0.25,(@2);*OPC;… (+1 more)" in row
    with bench.http("olga") as h:
        h.post(f"/v1/runs/{run}/takeover/{tk}/deny",
               json={"notes": "no", "proposalHash": shown_hash(h, tk)}).raise_for_status()


def test_a_line_break_in_free_text_never_prints_a_line_of_its_own(bench: Bench) -> None:
    fake_run = "run-00000000-fake  script  olga       active"
    run = run_of(bench, f"rail\n{fake_run}")
    out = as_olga(bench, "runs")
    assert not any(line.startswith("run-00000000-fake") for line in out), out

    fake_event = "    99  2026-12-06T22:00:00  approval_granted     tk-fake"
    with bench.http("bot") as h:
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu", "command": "VOLT 1,(@1)"})
        tk = r.json()["takeover"]["id"]
        h.post(f"/v1/runs/{run}/close", json={"reason": f"done\n{fake_event}"}
               ).raise_for_status()
    out = as_olga(bench, "journal", run)
    assert not any(line.startswith("    99") for line in out), out
    assert any("done\\u000a    99" in line for line in out), out
    assert as_olga(bench, "show", tk)  # cancelled with the run

    with bench.http("bot") as h:
        r = h.post(f"/v1/runs/{run_of(bench, 'asks')}/questions", json={"questions": [{
            "text": "Which rail?\n     - 12 V: the DUT's own rating",
            "options": [{"label": "3.3 V"}, {"label": "5 V"}]}]})
        assert r.status_code == 201, r.text
    out = as_olga(bench, "questions")
    assert not any(line.startswith("     - 12 V") for line in out), out
    assert sum(line.startswith("     - ") for line in out) == 2, out

    run = run_of(bench, "denied")
    with bench.http("bot") as h:
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu", "command": "VOLT 2,(@1)"})
        tk = r.json()["takeover"]["id"]
    as_olga(bench, "show", tk)
    out = as_olga(bench, "deny", tk, "--notes", f"not now\n{tk}: executed: VOLT 2.0,(@1)")
    assert not any(line.startswith(f"{tk}: executed") for line in out), out


def test_show_says_who_edited_a_request_and_what_runs(bench: Bench) -> None:
    """After oscar's edit, ``show`` printed the requester's command (1 V) above actions at
    2 V with nothing between them: now an ``edited`` line names oscar, the edit and what
    runs."""
    run = run_of(bench, "edited")
    with bench.http("bot") as h:
        r = h.post(f"/v1/runs/{run}/scpi",
                   json={"instrument": "psu", "command": "VOLT 1,(@1);OUTP ON,(@1)"})
        tk = r.json()["takeover"]["id"]
    with bench.http("oscar") as h:
        r = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                   json={"approve": ["output_enable"], "edits": {"CH1.voltage": "2"},
                         "proposalHash": shown_hash(h, tk)})
        assert r.status_code == 200, r.text
    out = as_olga(bench, "show", tk)
    edited = [line for line in out if line.startswith("  edited")]
    assert len(edited) == 1, out
    assert "by oscar at " in edited[0]
    assert edited[0].endswith(": CH1.voltage=2; what runs now: VOLT 2.0,(@1); OUTP 1,(@1) "
                              "(not the command as sent)")


def test_show_gives_every_value_its_unit(bench: Bench) -> None:
    """``show`` printed the change as ``ch1.voltage: 0.0 → 2.0`` and ``ch1.output: 0 →
    1``, and the setpoints an output enable stands on as ``CH1 voltage 5.0``: no unit, no
    label, while the console said ``CH1 voltage setpoint 0.000 V → 2.000 V``. Each is now
    said in the console's words, from the server (a lab's own profile need not be on the
    reviewer's machine)."""
    run = run_of(bench, "units")
    with bench.http("bot") as h:
        r = h.post(f"/v1/runs/{run}/scpi",
                   json={"instrument": "psu", "command": "VOLT 5,(@1);CURR 0.1,(@1)"})
        first = r.json()["takeover"]["id"]
    out = as_olga(bench, "show", first)
    assert "  change        CH1 voltage setpoint 0.000 V → 5.000 V" in out, out
    assert "  change        CH1 current limit 1.000 A → 0.100 A" in out, out
    as_olga(bench, "approve", first, "--setpoint")
    with bench.http("bot") as h:
        on = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                  "command": "OUTP ON,(@1)"}).json()
        needs = h.post(f"/v1/runs/{run}/scpi", json={
            "instrument": "psu", "command": "CURR 0.2,(@3);OUTP ON,(@3)"}).json()
    out = as_olga(bench, "show", on["takeover"]["id"])
    assert "  change        CH1 output OFF → ON" in out, out
    assert any(line.startswith("  setpoint      CH1 voltage 5.000 V approved by olga at ")
               and line.endswith(f" in {first}") for line in out), out
    out = as_olga(bench, "show", needs["takeover"]["id"])
    assert any(line.startswith("  setpoint      CH3 voltage 0.000 V: not set here")
               for line in out), out


@pytest.mark.parametrize("args", [("profile", "check", "e36312a"), ("--json", "pending")])
def test_a_reader_gone_is_no_traceback(bench: Bench, args: tuple[str, ...]) -> None:
    """``bench-gate … | head -1`` (the reader closes before the output is written) raised
    BrokenPipeError with a traceback and exit 1; the command now ends with its own code."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    try:
        done = subprocess.run([sys.executable, "-m", "bench_gate.cli", *args], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=60,
                              env={**os.environ, "BENCH_GATE_URL": bench.url,
                                   "BENCH_GATE_TOKEN": bench.tokens["olga"]})
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (0, "")


def test_approving_a_request_that_runs_on_resend_says_approved_once(bench: Bench) -> None:
    """A socket door's ``GATE:HOLD REFUSE`` request, approved with the CLI: the line said
    ``tk-…: approved: approved; it runs when its requester resends …``."""
    with bench.http("bot") as h:
        door = {i["name"]: i for i in h.get("/v1/instruments").json()}["psu"]
    rm = pyvisa.ResourceManager("@py")  # shared per process: never rm.close() here
    psu: Any = rm.open_resource(f"TCPIP0::{door['doorHost']}::{door['doorPort']}::SOCKET",
                                read_termination="\n", write_termination="\n", timeout=15_000)
    try:
        psu.write("GATE:HOLD REFUSE")
        psu.write("VOLT 0.7,(@1)")
        tk = psu.query("GATE:STAT?").split(",")[1].strip('"')
        assert psu.query("SYST:ERR?").startswith(f'-203,"Command protected; {tk} waits')
        as_olga(bench, "show", tk)
        said = as_olga(bench, "approve", tk, "--setpoint")[-1]
        assert said.startswith(f"{tk}: approved; it runs when its requester resends the same "
                               "command before "), said
        psu.write("VOLT 0.7,(@1)")  # the resend runs it
        assert psu.query("SYST:ERR?").lstrip("+").startswith('0,"No error"')
        assert psu.query("GATE:STAT?").startswith(f'EXECUTED,"{tk}"')
    finally:
        psu.close()
