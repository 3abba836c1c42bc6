"""The test engineer's CLI says what is true, in every command, before anything else: a
refused decision never reads as one happening, ``--json`` is JSON everywhere it is taken,
each help lists exactly what its command takes, bad arguments are usage errors before
anything is sent, a refused command is shown as refused, and what is shown of an
instrument is what bench.toml says and what answers."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

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
