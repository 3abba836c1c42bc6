"""What the console shows is what runs, in real headless Chromium against a real server and
the simulated bench (tests/_browser.py).

1. A field a message sets more than once: the "Approve with changes" box held the first
   value ('VOLT 1,(@1);VOLT 5.5,(@1)' showed CH1 voltage [1] V), though the channel is left
   at the last (5.5 V), and an approval without touching it sent 5.5 V. The box holds the
   value the request leaves and says each step; an edit replaces every one.
2. The queue's channel column named only the first channel a request touches
   ('VOLT 1,(@1);VOLT 2,(@3)' read CH1): it names every one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from ..._browser import sign_in
from ..._http_bench import Bench, start_bench


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("console-shown"))


@pytest.fixture(scope="module")
def page(browser: Any, bench: Bench) -> Iterator[Any]:
    pg = sign_in(browser, bench)
    yield pg
    pg.context.close()


def submit(bench: Bench, command: str) -> str:
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "script", "goal": "shown is what runs"}).json()
        r = h.post(f"/v1/runs/{run['id']}/scpi", json={"instrument": "psu", "command": command})
        assert r.status_code == 202, r.text
        return str(r.json()["takeover"]["id"])


def status(bench: Bench, tk: str) -> str:
    with bench.http("olga") as h:
        return str(h.get(f"/v1/takeover/{tk}").json()["status"])


def test_the_edit_box_holds_what_the_channel_is_left_at(page: Any, bench: Bench) -> None:
    pg = page
    tk = submit(bench, "VOLT 1,(@1);VOLT 5.5,(@1)")
    pg.goto(f"{bench.url}/requests/{tk}")
    box = pg.locator("input[name='edit:CH1.voltage']")
    assert box.input_value() == "5.5"
    said = pg.locator("fieldset.edits").inner_text()
    assert "set 2 times in this message: 1.000 V, then 5.500 V" in said
    pg.check("#kind-setpoint")
    pg.click("#approve-button")
    pg.wait_for_url(re.compile(f"/requests/{tk}$"))
    assert status(bench, tk) == "executed"
    assert float(bench.psu("VOLT? (@1)")) == 5.5  # what the box said, on the PSU's own port

    tk = submit(bench, "VOLT 1,(@1);VOLT 5.5,(@1)")
    pg.goto(f"{bench.url}/requests/{tk}")
    pg.fill("input[name='edit:CH1.voltage']", "2")
    pg.check("#kind-setpoint")
    pg.click("#approve-button")
    pg.wait_for_url(re.compile(f"/requests/{tk}$"))
    assert status(bench, tk) == "executed"
    assert float(bench.psu("VOLT? (@1)")) == 2.0


def test_the_queue_names_every_channel_a_request_touches(page: Any, bench: Bench) -> None:
    pg = page
    tk = submit(bench, "VOLT 1,(@1);VOLT 2,(@3)")
    pg.goto(bench.url + "/")
    cell = pg.locator(f"tr[data-id='{tk}'] td").first.inner_text()
    assert "CH1" in cell and "CH3" in cell, cell


def test_a_page_left_open_says_its_request_was_edited(page: Any, bench: Bench) -> None:
    """Oscar approves the output enable with an edit (a new proposal, still pending) while
    olga's page shows the old one: her page says so at once and will not approve from it;
    before, only a change of status showed the banner."""
    pg = page
    tk = submit(bench, "VOLT 1,(@1);OUTP ON,(@1)")
    with pg.expect_response(lambda r: r.url.endswith("/events")):
        pg.goto(f"{bench.url}/requests/{tk}")
    pg.wait_for_timeout(500)  # the stream's headers are out; its subscription follows them
    assert pg.locator("#changed-banner").is_hidden()
    with bench.http("oscar") as h:
        shown = h.get(f"/v1/takeover/{tk}").json()
        seen, run = shown["proposalHash"], shown["runId"]
        r = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                   json={"approve": ["output_enable"], "edits": {"CH1.voltage": "2"},
                         "proposalHash": seen})
        assert r.status_code == 200, r.text
        assert r.json()["request"]["status"] == "pending"
    pg.wait_for_selector("#changed-banner:not([hidden])")
    assert "edited since the page loaded" in pg.inner_text("#changed-banner")
    pg.check("#kind-setpoint")
    assert pg.locator("#approve-button").is_disabled()
    with bench.http("olga") as h:
        now = h.get(f"/v1/takeover/{tk}").json()
    assert now["status"] == "pending"
    assert [(a["kind"], a["by"]) for a in now["approvalsGiven"]] == [("output_enable", "oscar")]


def test_the_journal_keeps_the_words_beside_the_box_that_was_ticked(page: Any,
                                                                     bench: Bench) -> None:
    """An output enable standing on an approved setpoint: its box reads 'turns ON and the
    DUT is energized at 5.000 V (olga, tk-…), 0.100 A (olga, tk-…)'. The approval's
    journaled meaning said only '...turns ON and the DUT is energized': the values the
    person read were not what was recorded. Now the meaning is the box's words."""
    pg = page
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "script", "goal": "cover"}).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi",
                   json={"instrument": "psu", "command": "VOLT 5,(@1);CURR 0.1,(@1)"})
        first = r.json()["takeover"]["id"]
    with bench.http("olga") as h:
        seen = h.get(f"/v1/takeover/{first}").json()["proposalHash"]
        done = h.post(f"/v1/runs/{run}/takeover/{first}/grant",
                      json={"approve": ["setpoint"], "proposalHash": seen})
        assert done.json()["request"]["status"] == "executed", done.text
    with bench.http("bot") as h:
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu", "command": "OUTP ON,(@1)"})
        tk = r.json()["takeover"]["id"]
        assert r.json()["takeover"]["approvalsMissing"] == ["output_enable"], r.text
    pg.goto(f"{bench.url}/requests/{tk}")
    box = " ".join(pg.locator("label.decision").filter(
        has=pg.locator("#kind-output_enable")).inner_text().split())
    assert box.endswith(f"at 5.000 V (olga, {first}), 0.100 A (olga, {first})"), box
    pg.check("#kind-output_enable")
    pg.click("#approve-button")
    pg.wait_for_url(re.compile(f"/requests/{tk}$"))
    assert status(bench, tk) == "executed"
    assert bench.psu("OUTP? (@1)") == "1"
    with bench.http("olga") as h:
        events = h.get(f"/v1/runs/{run}/journal").json()["events"]
    meanings = [e["data"]["meaning"] for e in events
                if e["type"] == "approval_granted" and e.get("requestId") == tk]
    assert meanings == [box], meanings


def test_an_edited_request_says_who_edited_it_and_what_runs(page: Any, bench: Bench) -> None:
    """Oscar approved the output enable with CH1.voltage=2 on 'VOLT 1,(@1);OUTP ON,(@1)'.
    Olga's page showed 'Command as sent: VOLT 1,(@1);OUTP ON,(@1)' above actions at 2 V
    with no word of an edit: the rationale argued for 1 V, the setpoint she approves is
    oscar's. The page (and the queue) now say who edited it, what, and what runs."""
    pg = page
    tk = submit(bench, "VOLT 1,(@1);OUTP ON,(@1)")
    with bench.http("oscar") as h:
        shown = h.get(f"/v1/takeover/{tk}").json()
        r = h.post(f"/v1/runs/{shown['runId']}/takeover/{tk}/grant",
                   json={"approve": ["output_enable"], "edits": {"CH1.voltage": "2"},
                         "proposalHash": shown["proposalHash"]})
        assert r.status_code == 200, r.text
    pg.goto(f"{bench.url}/requests/{tk}")
    said = " ".join(pg.inner_text("p.edited").split())
    assert said.startswith("Edited before approval by oscar at"), said
    assert "CH1.voltage=2; what runs now: VOLT 2.0,(@1); OUTP 1,(@1)" in said
    pg.goto(bench.url + "/")
    assert "EDITED BY oscar" in pg.locator(f"tr[data-id='{tk}']").inner_text()


def test_the_timeline_shows_what_an_edit_showed_and_what_each_approval_meant(
        page: Any, bench: Bench) -> None:
    """The run timeline opened only the first handoff ('what was shown'): after an edit,
    what the next approver was shown (the proposal_edited event's actions, margins, diff)
    and the words each approver ticked (the approval's meaning) were in the journal but not
    on the page."""
    pg = page
    tk = submit(bench, "VOLT 1,(@1);OUTP ON,(@1)")
    with bench.http("oscar") as h:
        shown = h.get(f"/v1/takeover/{tk}").json()
        run = shown["runId"]
        r = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                   json={"approve": ["output_enable"], "edits": {"CH1.voltage": "3"},
                         "proposalHash": shown["proposalHash"]})
        assert r.status_code == 200, r.text
    pg.goto(f"{bench.url}/runs/{run}")
    edited = pg.locator("tr.ev-proposal_edited details.shown-edited")
    edited.locator("summary").click()
    # The journal's JSON as the first handoff's is shown (tojson: '→' is \u2192).
    assert re.search(r'"words": "CH1 voltage setpoint \d+\.\d{3} V \\u2192 3\.000 V"',
                     edited.inner_text())
    meaning = pg.locator("tr.ev-approval_granted p.meaning").inner_text()
    assert meaning.startswith("I approve the output enable: the output of CH1 turns ON and "
                              "the DUT is energized"), meaning
