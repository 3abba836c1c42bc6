"""The console end to end in real headless Chromium (Playwright, Debian's /usr/bin/chromium,
never a downloaded browser) against a real server, a temporary store and the simulated bench.

Screenshots go to ``test-artifacts/`` on every run. The browser and the sign-in are shared
(tests/_browser.py, the ``browser`` fixture in conftest.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
import pyvisa

from ..._browser import TIMEOUT_MS, shot, sign_in
from ..._http_bench import Bench, start_bench


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("console-browser"))


@pytest.fixture(scope="module")
def page(browser: Any, bench: Bench) -> Iterator[Any]:
    """Olga, an operator, signed in through the sign-in form."""
    pg = sign_in(browser, bench)
    yield pg
    pg.context.close()


def submit(bench: Bench, command: str, rationale: str, who: str = "bot") -> tuple[str, str]:
    """A script's write through the HTTP API: held, so it answers 202 at once."""
    with bench.http(who) as h:
        run = h.post("/v1/runs", json={"kind": "script",
                                       "goal": "characterise the DUT's 3.3 V rail"}).json()
        h.post(f"/v1/runs/{run['id']}/scpi", json={"instrument": "psu", "command": "*IDN?"})
        r = h.post(f"/v1/runs/{run['id']}/scpi", json={
            "instrument": "psu", "command": command, "rationale": rationale,
            "confidence": 0.8})
        assert r.status_code == 202, r.text
        return str(run["id"]), str(r.json()["takeover"]["id"])


def takeover(bench: Bench, tk: str, who: str = "olga") -> dict[str, Any]:
    with bench.http(who) as h:
        body: dict[str, Any] = h.get(f"/v1/takeover/{tk}").json()
        return body


def psu_write(bench: Bench, command: str) -> None:
    """The person at the front panel (``SIM:PANEL``, which the gateway's lock does not
    cover): a write straight to the simulated PSU."""
    rm = pyvisa.ResourceManager("@py")
    res: Any = rm.open_resource(bench.sim.psu_resource_name, read_termination="\n",
                                write_termination="\n")
    try:
        res.write("SIM:PANEL")
        res.write(command)
    finally:
        res.close()


def open_from_queue(pg: Any, bench: Bench, tk: str) -> None:
    pg.goto(bench.url + "/")
    pg.click(f"tr[data-id='{tk}'] a.button")
    pg.wait_for_url(re.compile(f"/requests/{tk}$"))


def test_held_write_appears_live_and_needs_two_separate_decisions(page: Any,
                                                                  bench: Bench) -> None:
    pg = page
    pg.goto(bench.url + "/")
    pg.wait_for_selector("#live-dot.on")
    pg.evaluate("window.__loadedOnce = true")
    _, tk = submit(bench, "VOLT 3.3,(@1);:OUTP ON,(@1)",
                   "bring the 3.3 V rail up for the load test")
    row = pg.wait_for_selector(f"tr[data-id='{tk}']")
    assert pg.evaluate("window.__loadedOnce") is True  # arrived without a reload
    assert "TURNS OUTPUT ON" in row.inner_text()
    assert pg.title().startswith("(")  # the title counts what waits
    shot(pg, "queue")

    pg.click(f"tr[data-id='{tk}'] a.button")
    pg.wait_for_url(re.compile(f"/requests/{tk}$"))
    assert "CH1 voltage setpoint 0.000 V → 3.300 V" in pg.inner_text("ol.actions")
    proposed = pg.locator("#diff tr.chg[data-key='ch1.voltage'] td.proposed").inner_text()
    assert proposed == "3.300 V"
    assert pg.locator("#diff tr.chg[data-key='ch1.output'] td.proposed").inner_text() == "ON"
    assert "energizes the DUT" in pg.inner_text("p.reversibility")
    setpoint, enable = pg.locator("#kind-setpoint"), pg.locator("#kind-output_enable")
    assert not setpoint.is_checked() and not enable.is_checked()
    assert pg.locator("#approve-button").is_disabled()
    shot(pg, "request")

    setpoint.check()
    pg.click("#approve-button")
    pg.wait_for_selector("li.given[data-kind='setpoint']")
    assert pg.locator("li.waiting[data-kind='output_enable']").count() == 1
    assert "still needs its own approval" in pg.inner_text("p.flash")
    assert takeover(bench, tk)["approvalsMissing"] == ["output_enable"]
    assert bench.psu("OUTP? (@1)") == "0"
    shot(pg, "request-setpoint-approved")

    assert not pg.locator("#kind-output_enable").is_checked()
    pg.check("#kind-output_enable")
    pg.click("#approve-button")
    pg.wait_for_selector("#receipt")
    assert takeover(bench, tk)["status"] == "executed"
    assert bench.psu("OUTP? (@1)") == "1"
    assert Decimal(bench.psu("VOLT? (@1)")) == Decimal("3.3")
    shot(pg, "request-executed")


def test_deny_with_a_note_reaches_the_requester(page: Any, bench: Bench) -> None:
    pg = page
    _, tk = submit(bench, "VOLT 5,(@2)", "sweep CH2 to 5 V")
    open_from_queue(pg, bench, tk)
    pg.click("#deny-button")  # the note is required: the browser will not send it empty
    assert takeover(bench, tk)["status"] == "pending"
    pg.fill("#deny-form textarea[name=notes]", "CH2 feeds the 3.3 V LDO: stay below 4 V")
    pg.click("#deny-button")
    pg.wait_for_selector("#receipt")
    seen = takeover(bench, tk, who="bot")  # what the requester gets back
    assert seen["status"] == "denied"
    assert seen["notes"] == "CH2 feeds the 3.3 V LDO: stay below 4 V"
    assert "stay below 4 V" in seen["outcome"]


def test_approve_with_an_edit_runs_the_edited_value(page: Any, bench: Bench) -> None:
    pg = page
    _, tk = submit(bench, "VOLT 2,(@2)", "CH2 to 2 V")
    open_from_queue(pg, bench, tk)
    field = pg.locator("input[name='edit:CH2.voltage']")
    field.fill("13")  # above the bench envelope of 12 V: refused before submit
    pg.check("#kind-setpoint")
    assert pg.locator("#approve-button").is_disabled()
    assert "must be 0 to 12" in pg.inner_text("#edit-error")
    field.fill("2.5")
    assert pg.locator("#approve-button").is_enabled()
    assert "with my changes" in pg.inner_text("#approve-button")
    pg.click("#approve-button")
    pg.wait_for_selector("#receipt")
    done = takeover(bench, tk)
    assert done["status"] == "executed"
    assert done["receipt"]["sent"] == ["VOLT 2.5,(@2)"]
    assert Decimal(bench.psu("VOLT? (@2)")) == Decimal("2.5")


def test_a_change_behind_the_page_is_refused_as_stale(page: Any, bench: Bench) -> None:
    pg = page
    _, tk = submit(bench, "VOLT 4,(@3)", "CH3 to 4 V")
    open_from_queue(pg, bench, tk)
    pg.check("#kind-setpoint")
    psu_write(bench, "VOLT 1.1,(@3)")  # someone turns the knob after the page loaded
    pg.click("#approve-button")
    pg.wait_for_selector("#refusal")
    assert "changed since this page was loaded" in pg.inner_text("#refusal")
    assert "1.100 V" in pg.inner_text("#refusal table")
    assert takeover(bench, tk)["status"] == "pending"
    assert takeover(bench, tk)["approvalsGiven"] == []
    assert Decimal(bench.psu("VOLT? (@3)")) == Decimal("1.1")
    assert "≠" in pg.inner_text("#diff tr[data-key='ch3.voltage']")
    shot(pg, "request-stale-refused")
    # Asked again with the new state in view, the core itself sends it back for review.
    pg.check("#kind-setpoint")
    pg.click("#approve-button")
    pg.wait_for_url(re.compile(r"/requests/tk-(?!" + tk[3:] + ")"))
    assert takeover(bench, tk)["status"] == "stale"
    assert Decimal(bench.psu("VOLT? (@3)")) == Decimal("1.1")
    assert "replaces" in pg.inner_text("article")


def test_instrument_panel_and_an_engineers_own_change(page: Any, bench: Bench) -> None:
    pg = page
    # CH1 on at 3.3 V as the first test leaves it (set at the panel: this test may run alone).
    psu_write(bench, "VOLT 3.3,(@1)")
    psu_write(bench, "OUTP 1,(@1)")
    pg.goto(bench.url + "/instruments/psu")
    pg.wait_for_selector(".channel[data-channel='1'] [data-output='1']")
    pg.wait_for_function("document.querySelectorAll('svg.plot polyline').length >= 6",
                         timeout=TIMEOUT_MS)
    pg.wait_for_timeout(4500)  # a few live refreshes, for a plot with more than one point
    assert "3.300 V" in pg.inner_text(".channel[data-channel='1']")
    shot(pg, "panel")
    form = pg.locator("#change-3")
    form.locator("input[name=voltage]").fill("2.25")
    form.locator("input[name=current]").fill("0.4")  # CH3's 1 A default is above 0.5 A
    form.locator("select[name=output]").select_option("ON")
    form.locator("input[name=rationale]").fill("scope the CH3 ramp")
    form.locator("button").click()
    pg.wait_for_url(re.compile(r"/requests/tk-"))
    assert "Your own change" in pg.inner_text("main")
    assert bench.psu("OUTP? (@3)") == "0"
    pg.check("#kind-setpoint")
    pg.check("#kind-output_enable")
    pg.click("#approve-button")  # the core takes one kind per self-approval
    pg.wait_for_selector("#refusal")
    assert "one approval kind at a time" in pg.inner_text("#refusal")
    pg.check("#kind-setpoint")
    pg.click("#approve-button")
    pg.wait_for_selector("li.given[data-kind='setpoint']")
    pg.check("#kind-output_enable")
    pg.click("#approve-button")
    pg.wait_for_selector("#receipt")
    assert bench.psu("OUTP? (@3)") == "1"
    assert Decimal(bench.psu("VOLT? (@3)")) == Decimal("2.25")
    pg.click("a[href^='/runs/']")
    pg.wait_for_selector("table.waterfall")
    text = pg.inner_text("table.waterfall")
    assert "approval granted" in text and "step completed" in text
    shot(pg, "timeline")


def test_history_and_a_phone_sized_queue(browser: Any, page: Any, bench: Bench) -> None:
    pg = page
    # Its own denied request: pytest-xdist may run this test apart from the others here.
    run, denied = submit(bench, "VOLT 4.5,(@2)", "sweep CH2 to 4.5 V")
    with bench.http("olga") as h:
        r = h.post(f"/v1/runs/{run}/takeover/{denied}/deny", json={
            "notes": "not above 4 V", "proposalHash": takeover(bench, denied)["proposalHash"]})
        assert r.status_code == 200, r.text
    pg.goto(bench.url + "/history?outcome=denied")
    assert pg.locator("table.history tbody tr.s-denied").count() >= 1
    shot(pg, "history")
    _, tk = submit(bench, "CURR 0.4,(@2)", "limit CH2 for the short-circuit test")
    cookies = pg.context.cookies()
    phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    try:
        phone.add_cookies(cookies)
        small = phone.new_page()
        small.goto(bench.url + "/")
        small.wait_for_selector(f"tr[data-id='{tk}']")
        width = small.evaluate("document.documentElement.scrollWidth")
        assert width <= 400, f"the queue scrolls sideways on a phone ({width} px)"
        shot(small, "queue-phone")
        small.goto(bench.url + f"/requests/{tk}")
        small.wait_for_selector("#approve-form")
        shot(small, "request-phone")
    finally:
        phone.close()


def test_a_silent_clients_run_closing_is_shown_live(page: Any, bench: Bench) -> None:
    """A run whose client stopped heartbeating closes: the operator's open page says so at
    once, in words, and its request leaves the queue."""
    page.goto(bench.url + "/")
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "agent", "heartbeatSeconds": 2}).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                 "command": "VOLT 0.6,(@2)"})
        assert r.status_code == 202, r.text
        tk = r.json()["takeover"]["id"]
    page.wait_for_selector(f"tr[data-id='{tk}']")
    said = page.wait_for_selector("p.live-alert[data-alert='client_gone']", timeout=8000)
    assert said.text_content() == (f"{run}: client gone: no heartbeat for 2 s; its "
                                   "undecided requests were cancelled, nothing of them "
                                   "was written")
    page.wait_for_selector(f"tr[data-id='{tk}']", state="detached")
