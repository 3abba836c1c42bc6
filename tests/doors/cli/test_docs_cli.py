"""CLI transcripts in docs/ run as written against a real server: each ``$ bench-gate`` line
of the block, with its output matched line by line against the doc's (``…`` stands for the
rest of an id, and a figure for any figure)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench_gate.cli import main

from ..._http_bench import Bench, start_bench

DOCS = Path(__file__).resolve().parents[3] / "docs"


def transcript(doc: str, first: str) -> list[tuple[str, list[str]]]:
    """The ```console block of ``docs/<doc>`` whose first command starts ``first``: each
    command with the output lines the doc shows under it."""
    text = (DOCS / doc).read_text(encoding="utf-8")
    block = text[text.index(f"```console\n$ {first}"):].split("\n```", 1)[0]
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines()[1:]:
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


def shape(line: str) -> re.Pattern[str]:
    """A doc's output line as a pattern: a word cut by ``…`` is any id, a figure any figure."""
    parts = re.split(r"(\S*…|\d+)", line)
    return re.compile("".join(r"\S+" if p.endswith("…") else r"\d+" if p.isdigit()
                              else re.escape(p) for p in parts) + r"\s*")


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("docs-cli"))


def test_mcp_questions_transcript(bench: Bench, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/mcp.md, "Questions an agent can ask": `questions`, then `answer` (it printed
    "answered — answered by olga" where the doc had one "answered")."""
    with bench.http("ada") as h:
        r = h.post("/v1/tokens", json={"name": "claude", "role": "requester"})
        assert r.status_code == 201, r.text
        bench.tokens["claude"] = r.json()["token"]
    with bench.http("claude") as h:
        run = h.post("/v1/runs", json={"kind": "agent", "goal": "which channel"}).json()["id"]
        q = h.post(f"/v1/runs/{run}/questions", json={"questions": [{
            "text": "Which channel feeds the DUT?",
            "options": [{"label": "CH1"}, {"label": "CH2", "description": "the 25 V one"}]}]})
        assert q.status_code == 201, q.text
        qid = q.json()["id"]
    monkeypatch.setenv("BENCH_GATE_URL", bench.url)
    monkeypatch.setenv("BENCH_GATE_TOKEN", bench.tokens["olga"])
    steps = transcript("mcp.md", "bench-gate questions")
    assert [shlex.split(cmd, comments=True)[1] for cmd, _ in steps] == ["questions", "answer"]
    for cmd, shown in steps:
        argv = shlex.split(cmd.replace("q-5c1e…", qid), comments=True)
        code = main(argv[1:])
        out, err = capsys.readouterr()
        assert code == 0 and not err, (cmd, out, err)
        lines = out.splitlines()
        assert len(lines) == len(shown), (cmd, out)
        for doc_line, line in zip(shown, lines, strict=True):
            assert shape(doc_line).fullmatch(line), (doc_line, line)
