"""The README's CLI section, run as written against a real server: each `bench-gate` line
of its example block, in order (``$TK``, ``$TK2``, ``$RUN`` and the prefix
``tk-731969e3`` stand for ids made here), and its table of exit codes against the CLI's."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench_gate.cli import main
from bench_gate.doorway import EXIT_CODES

from ..._http_bench import Bench, start_bench

README = Path(__file__).resolve().parent.parent.parent.parent / "README.md"


def examples() -> list[str]:
    text = README.read_text()
    block = text.split("<!-- cli-examples -->", 1)[1].split("<!-- /cli-examples -->", 1)[0]
    return [line for line in block.splitlines() if line.startswith(("bench-gate ", "export "))]


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("readme"))


def test_every_cli_example_runs(bench: Bench, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "script", "goal": "README"}).json()["id"]
        tks = [h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu", "command": c}
                      ).json()["takeover"]["id"] for c in ("VOLT 5,(@1)", "OUTP ON,(@1)")]
    names = {"$TK2": tks[1], "$TK": tks[0], "$RUN": run, "tk-731969e3": tks[0][:11]}
    monkeypatch.setenv("BENCH_GATE_URL", bench.url)
    lines = examples()
    assert [line.split()[1] for line in lines if line.startswith("bench-gate")] == [
        "pending", "--json", "show", "show", "approve", "wait", "show", "show", "deny",
        "runs", "journal", "watch"]
    for line in lines:
        for name, value in names.items():
            line = line.replace(name, value)
        argv = shlex.split(line, comments=True)
        if argv[0] == "export":
            assert argv[1].startswith("BENCH_GATE_TOKEN=")
            monkeypatch.setenv("BENCH_GATE_TOKEN", bench.tokens["olga"])
            continue
        code = main(argv[1:])
        out, err = capsys.readouterr()
        assert code == 0, (line, out, err)
        assert out.strip() and "Traceback" not in out + err, line
    shown = main(["show", tks[0]])
    out = capsys.readouterr().out
    assert shown == 0 and "executed: VOLT 5.0,(@1)" in out and "expires" not in out
    assert os.environ["BENCH_GATE_TOKEN"] == bench.tokens["olga"]


def test_the_exit_code_table_is_the_cli_s() -> None:
    text = README.read_text()
    rows = dict(re.findall(r"^\| (\d) \| (.+?) \|$", text, re.M))
    for outcome, code in EXIT_CODES.items():
        word = "still undecided" if code == 8 else str(outcome)
        assert word in rows[str(code)], (outcome, code, rows)
