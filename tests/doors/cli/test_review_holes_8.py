"""Review 8 (the approval flow): free text a requester writes is shown to the approver beside
the proposal. A terminal escape in a rationale or a goal repainted ``bench-gate show`` /
``approve`` on the approver's terminal: the command line rewritten to ``VOLT 1``, every line
after it (the actions, the margins, the proposal hash) hidden, while ``VOLT 11`` was what
the approval named and what ran. Text that does not show as itself is refused at every
door, and the command line escapes any it is given anyway (bench_gate/texts.py)."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench_gate.store import open_store
from bench_gate.texts import hidden, visible

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
    assert cli(bench, "olga", "show", tk).returncode == 0
    out = cli(bench, "olga", "deny", tk, "--notes", "not now:\r\n\tthe DUT is out")
    assert out.returncode == 0, out.stderr


def test_show_escapes_what_was_stored_before_the_gateway_refused_it(bench: Bench) -> None:
    """Text stored by an older gateway (the store is read as it is): ``show`` prints every
    field on its own line, with nothing a terminal would act on."""
    _, tk = _hold(bench, "VOLT 1.75,(@2)")
    store = open_store(bench.db)
    try:
        req = store.get_request(tk)
        assert req is not None
        req.rationale = req.handoff["rationale"] = FORGED_RATIONALE + "\n  actions\n    - x"
        assert store.save_request(req, req.version, [])
    finally:
        store.close()
    out = cli(bench, "olga", "show", tk)
    assert out.returncode == 0, out.stderr
    assert all(c.isprintable() or c == "\n" for c in out.stdout), ascii(out.stdout)
    assert "one volt for the sensor\\u001b[8m\\u000a  actions" in out.stdout, out.stdout
    assert [ln for ln in out.stdout.splitlines() if ln.startswith("  actions")] == ["  actions"]
    assert "CH2 voltage setpoint" in out.stdout


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_a_reader_prints_every_text_as_it_is_written(text: str) -> None:
    """``visible``: only characters a terminal prints as themselves; a one-line field never
    breaks a line; printable text is left as it is."""
    one = visible(text, lines=False)
    assert all(c.isprintable() for c in one), ascii(one)
    assert all(c.isprintable() or c == "\n" for c in visible(text))
    assert visible(text).count("\n") == text.count("\n")
    if text.isprintable():
        assert one == text


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_text_the_gateway_takes_shows_as_itself(text: str) -> None:
    """Taken text holds only what prints as itself, spaces, tabs and line breaks."""
    if hidden(text) is None:
        assert all(c.isprintable() or c in "\n\t" or unicodedata.category(c) == "Zs"
                   or (c == "\r" and text[i + 1:i + 2] == "\n")
                   for i, c in enumerate(text)), ascii(text)


# ------------------------------------------------------------------ what `approve` binds
def _hold(bench: Bench, command: str) -> tuple[str, str]:
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "script"}).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu", "command": command})
        assert r.status_code == 202, r.text
        return run, r.json()["takeover"]["id"]


def _edit_behind(bench: Bench, run: str, tk: str, volts: str) -> str:
    """oscar approves the output enable with CH1's voltage edited: a new proposal."""
    with bench.http("oscar") as h:
        r = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                   json={"approve": ["output_enable"], "edits": {"CH1.voltage": volts},
                         "proposalHash": shown_hash(h, tk)})
    assert r.status_code == 200 and r.json()["request"]["status"] == "pending", r.text
    return str(r.json()["request"]["proposalHash"])


def _ch1(bench: Bench) -> tuple[str, str]:
    return bench.psu("VOLT? (@1)"), bench.psu("OUTP? (@1)")


def _ch1_off(bench: Bench) -> None:
    _, tk = _hold(bench, "OUTP OFF,(@1)")
    with bench.http("olga") as h:
        tk_body = h.get(f"/v1/takeover/{tk}").json()
        h.post(f"/v1/runs/{tk_body['runId']}/takeover/{tk}/grant",
               json={"approve": tk_body["approvalsMissing"],
                     "proposalHash": tk_body["proposalHash"]})
    assert bench.psu("OUTP? (@1)") == "0"


def test_cli_approve_binds_the_proposal_its_person_was_shown_not_the_one_it_fetches(
        bench: Bench) -> None:
    """olga reads ``VOLT 1`` with ``show``; oscar approves the output enable with CH1 edited
    to 5.5 V; olga's ``approve --setpoint`` fetched the current proposal, printed it after
    the fact and sent its hash: 5.5 V went on the DUT. Now it names what ``show`` showed
    her: exit 9, nothing approved, the new proposal printed; approving again approves that."""
    before = _ch1(bench)
    run, tk = _hold(bench, "VOLT 1,(@1);:OUTP ON,(@1)")
    shown = cli(bench, "olga", "show", tk)
    assert shown.returncode == 0 and "1.000 V" in shown.stdout, shown.stdout
    new = _edit_behind(bench, run, tk, "5.5")
    a = cli(bench, "olga", "approve", tk, "--setpoint")
    assert a.returncode == 9, (a.stdout, a.stderr)
    assert "nothing was approved" in a.stderr and new in a.stdout and "5.500 V" in a.stdout
    assert _ch1(bench) == before  # the simulator's own port: nothing written
    # What was printed just now has been shown: approving again approves exactly it.
    again = cli(bench, "olga", "approve", tk, "--setpoint")
    assert again.returncode == 0, (again.stdout, again.stderr)
    assert f"{tk}: executed" in again.stdout
    assert Decimal(bench.psu("VOLT? (@1)")) == Decimal("5.5")
    _ch1_off(bench)


def test_cli_approve_of_a_request_never_shown_to_its_person_shows_it_first(
        bench: Bench) -> None:
    before = _ch1(bench)
    _, tk = _hold(bench, "VOLT 1.25,(@1)")
    cli(bench, "oscar", "show", tk)  # shown to oscar, not to olga
    a = cli(bench, "olga", "approve", tk, "--setpoint")
    assert a.returncode == 9, (a.stdout, a.stderr)
    assert "not shown to you" in a.stderr and "1.250 V" in a.stdout
    assert _ch1(bench) == before
    d = cli(bench, "olga", "deny", tk, "--notes", "not now")
    assert d.returncode == 0 and f"{tk}: denied" in d.stdout, (d.stdout, d.stderr)
