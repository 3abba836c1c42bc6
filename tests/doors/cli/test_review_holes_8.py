"""Review 8 (the approval flow): free text a requester writes is shown to the approver beside
the proposal. A terminal escape in a rationale or a goal repainted ``bench-gate show`` /
``approve`` on the approver's terminal: the command line rewritten to ``VOLT 1``, every line
after it (the actions, the margins, the proposal hash) hidden, while ``VOLT 11`` was what
the approval named and what ran. Text that does not show as itself is refused at every
door, and the command line escapes any it is given anyway (bench_gate/texts.py)."""

from __future__ import annotations

import contextlib
import io
import unicodedata
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench_gate._cli_show import summary
from bench_gate.texts import hidden

from ..._http_bench import Bench, shown_hash, start_bench
from .test_http_cli import cli

#: ESC [1A ESC [2K: up one line and clear it (the command line, printed just before the
#: goal); ESC [8m: conceal everything printed after (the actions, margins, the hash).
FORGED_GOAL = "\x1b[1A\x1b[2K  command       VOLT 1,(@1)\n  requester     bot (script)"
FORGED_RATIONALE = "one volt for the sensor\x1b[8m"
#: What a reader never sees as itself: a terminal escape, a lone CR (overwrites the line),
#: a direction override, a zero-width space, a line separator, a C1 CSI, a BOM.
UNSEEN = ["\x1b[8m", "a\rb", "\u202e1 V", "1\u200b0 V", "a\u2028b", "\x9b2J", "\ufeff"]


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("cli8"))


def test_a_rationale_never_repaints_the_proposal_on_the_approvers_terminal(
        bench: Bench) -> None:
    before = bench.psu("VOLT? (@1)")
    with bench.http("bot") as h:
        r = h.post("/v1/runs", json={"kind": "script", "goal": FORGED_GOAL})
        assert r.status_code == 422, r.text
        assert "U+001B" in r.text, r.text
        run = h.post("/v1/runs", json={"kind": "script"}).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu", "command": "VOLT 11,(@1)",
                                                  "rationale": FORGED_RATIONALE})
        assert r.status_code == 422, r.text
        assert "does not show as itself" in r.text, r.text
        held = h.get(f"/v1/runs/{run}/takeover")
        assert held.status_code == 200 and held.json() == [], held.text
    # Nothing reached the supply (its own port).
    assert bench.psu("VOLT? (@1)") == before


@pytest.mark.parametrize("text", UNSEEN)
def test_no_door_takes_text_that_does_not_show_as_itself(bench: Bench, text: str) -> None:
    with bench.http("bot") as h:
        assert h.post("/v1/runs", json={"kind": "script", "goal": text}).status_code == 422
        run = h.post("/v1/runs", json={"kind": "script"}).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                  "command": "VOLT 1.5,(@2)",
                                                  "rationale": text, "stepId": "s"})
        assert r.status_code == 422, r.text
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                  "command": "VOLT 1.5,(@2)"})
        tk = r.json()["takeover"]["id"]
    with bench.http("olga") as h:
        r = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                   json={"approve": ["setpoint"], "notes": text,
                         "proposalHash": shown_hash(h, tk)})
        assert r.status_code == 422, r.text
        r = h.post(f"/v1/runs/{run}/takeover/{tk}/deny",
                   json={"notes": text, "proposalHash": shown_hash(h, tk)})
        assert r.status_code == 422, r.text
        assert h.get(f"/v1/takeover/{tk}").json()["status"] == "pending"
    # Plain text with a line break (a browser's CR LF too) and a tab is text.
    out = cli(bench, "olga", "deny", tk, "--notes", "not now:\r\n\tthe DUT is out")
    assert out.returncode == 0, out.stderr


def _request(text: str) -> dict[str, Any]:
    """A pending request as the API shows it, every free-text field holding ``text``."""
    return {
        "id": "tk-1", "status": "pending", "instrument": "psu", "runId": "run-1",
        "message": "VOLT 11,(@1)", "required": ["setpoint"], "approvalsMissing": [],
        "approvalsGiven": [{"kind": "setpoint", "by": text, "at": "t", "notes": text}],
        "expiresAt": "2999-01-01T00:00:00+00:00", "proposalHash": "ab" * 32,
        "handoff": {"run": {"principal": text, "kind": "script"}, "goal": text,
                    "rationale": text, "reversibility": text,
                    "actions": [{"words": "CH1 voltage setpoint 11 V"}],
                    "risk": {"signals": [text]},
                    "history": [{"at": "t", "command": text, "status": text}]},
    }


def _printed(tk: dict[str, Any]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        summary(tk)
    return out.getvalue()


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_show_prints_every_field_as_it_is_written(text: str) -> None:
    """Whatever a stored field holds (text stored before the gateway refused it, a name),
    ``show`` prints only characters a terminal shows as themselves, one line per field."""
    printed = _printed(_request(text))
    assert all(c.isprintable() or c == "\n" for c in printed), ascii(printed)
    assert printed.count("\n") == _printed(_request("plain")).count("\n")
    assert "CH1 voltage setpoint 11 V" in printed


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_text_the_gateway_takes_shows_as_itself(text: str) -> None:
    """Taken text holds only what prints as itself, spaces, tabs and line breaks."""
    if hidden(text) is None:
        assert all(c.isprintable() or c in "\n\t" or unicodedata.category(c) == "Zs"
                   or (c == "\r" and text[i + 1:i + 2] == "\n")
                   for i, c in enumerate(text)), ascii(text)
