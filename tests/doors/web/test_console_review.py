"""What a reviewer must not have to guess (issue 19), in real headless Chromium at desktop
width and at 390 px: the setpoint approval behind an output enable, fields outside the
envelope flagged in words, CV/CC per channel, trend plots with axes and units, one
vocabulary (the denier in History, a suspension said as such, RFC 3339 times), no sideways
scrolling on a phone, the favicon, and /docs and /redoc with nothing fetched from beyond
127.0.0.1."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import pyvisa

from ..._browser import PHONE, TIMEOUT_MS, shot, sign_in
from ..._http_bench import Bench, shown_hash, start_bench

RFC3339_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
NO_OVERFLOW = "document.documentElement.scrollWidth <= window.innerWidth"
RED = "rgb(176, 0, 32)"  # --warn


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("console-review"))


@pytest.fixture(scope="module")
def desk(browser: Any, bench: Bench) -> Iterator[Any]:
    """Olga at her desk (1280 px)."""
    pg = sign_in(browser, bench)
    yield pg
    pg.context.close()


@pytest.fixture(scope="module")
def phone(browser: Any, bench: Bench) -> Iterator[Any]:
    """Olga on her phone (390 px)."""
    pg = sign_in(browser, bench, viewport=PHONE)
    yield pg
    pg.context.close()


class Script:
    """A requester's run through the HTTP API, with Olga deciding over the API."""

    def __init__(self, bench: Bench, goal: str) -> None:
        self.bench = bench
        with bench.http("bot") as h:
            self.run = str(h.post("/v1/runs", json={"kind": "script", "goal": goal}
                                  ).json()["id"])

    def hold(self, command: str, rationale: str = "part of the bring-up") -> str:
        with self.bench.http("bot") as h:
            r = h.post(f"/v1/runs/{self.run}/scpi", json={
                "instrument": "psu", "command": command, "rationale": rationale})
            assert r.status_code == 202, r.text
            return str(r.json()["takeover"]["id"])

    def grant(self, tk: str, *kinds: str) -> dict[str, Any]:
        with self.bench.http("olga") as h:
            r = h.post(f"/v1/runs/{self.run}/takeover/{tk}/grant",
                       json={"approve": list(kinds), "proposalHash": shown_hash(h, tk)})
            assert r.status_code == 200, r.text
            body: dict[str, Any] = r.json()["request"]
            return body


def front_panel(bench: Bench, *commands: str) -> None:
    """The person at the PSU's front panel (``SIM:PANEL``: the gateway's lock does not
    cover it)."""
    rm = pyvisa.ResourceManager("@py")
    res: Any = rm.open_resource(bench.sim.psu_resource_name, read_termination="\n",
                                write_termination="\n")
    try:
        for command in ("SIM:PANEL", *commands):
            res.write(command)
        error = str(res.query("SYST:ERR?")).strip()
        assert error.startswith(("+0", "0")), error  # every write was taken
    finally:
        res.close()


def fits(pg: Any, what: str) -> None:
    width = pg.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert pg.evaluate(NO_OVERFLOW), f"{what} scrolls sideways: {width}"


def test_an_output_enable_shows_the_setpoint_approval_behind_it(
        desk: Any, phone: Any, bench: Bench) -> None:
    script = Script(bench, "bring the 5 V rail up")
    volts = script.hold("VOLT 5,(@1)")
    assert script.grant(volts, "setpoint")["status"] == "executed"
    amps = script.hold("CURR 0.1,(@1)")
    assert script.grant(amps, "setpoint")["status"] == "executed"
    enable = script.hold("OUTP ON,(@1)", "power the DUT at the approved setpoint")

    # The API and the CLI's show read the same record: the handoff's setpointCover.
    with bench.http("bot") as h:
        shown = h.get(f"/v1/takeover/{enable}").json()
    assert shown["required"] == ["output_enable"]
    [cover_json] = shown["handoff"]["setpointCover"]
    assert cover_json["channel"] == 1
    assert [(f["field"], f["value"], f["by"], f["request"]) for f in cover_json["fields"]] == [
        ("voltage", "5.0", ["olga"], volts), ("current", "0.1", ["olga"], amps)]
    assert all(RFC3339_Z.match(f["at"]) for f in cover_json["fields"])

    desk.goto(bench.url + f"/requests/{enable}")
    assert desk.locator("#kind-setpoint").count() == 0  # only the output enable is asked
    cover = desk.locator("#setpoint-cover")
    assert cover.is_visible()
    rows = cover.locator("tbody tr")
    assert rows.count() == 2
    first, second = rows.nth(0).inner_text(), rows.nth(1).inner_text()
    assert "CH1 voltage setpoint" in first and "5.000 V" in first and "olga" in first
    assert "CH1 current limit" in second and "0.100 A" in second and "olga" in second
    # Each field links to the request whose approval put it in force, with its time.
    assert rows.nth(0).locator("a").get_attribute("href") == f"/requests/{volts}"
    assert rows.nth(1).locator("a").get_attribute("href") == f"/requests/{amps}"
    for stamp in cover.locator("time").all():
        assert RFC3339_Z.match(stamp.get_attribute("datetime") or "")
    label = desk.inner_text("label.decision")
    assert "5.000 V" in label and "0.100 A" in label and volts in label
    shot(desk, "request-setpoint-cover")

    phone.goto(bench.url + f"/requests/{enable}")
    assert phone.locator("#setpoint-cover").is_visible()
    fits(phone, "the request page with its setpoint cover")
    shot(phone, "request-setpoint-cover-phone")

    desk.check("#kind-output_enable")
    desk.click("#approve-button")
    desk.wait_for_selector("#receipt")
    assert bench.psu("OUTP? (@1)") == "1"
    flash = desk.inner_text("p.flash.ok")
    assert flash.startswith("Approved and executed: OUTP") and flash.count("xecuted") == 1
    outcome = desk.inner_text("p.outcome")
    assert not outcome.lower().startswith("executed"), outcome  # the status says it
    # The covering request opens from the link, executed, its outcome said once.
    desk.goto(bench.url + f"/requests/{volts}")
    assert desk.inner_text("#status") == "executed"
    assert desk.inner_text("main").lower().count("executed") <= 2, desk.inner_text("main")


def test_the_panel_flags_the_envelope_shows_cv_cc_and_plots_a_trend(
        desk: Any, phone: Any, bench: Bench) -> None:
    # CH1 5 V limited to 0.1 A into its 10 ohm load regulates current (1 V); CH3 2 V into
    # its 1 kohm load, with 0.4 A to spare, regulates voltage.
    front_panel(bench, "VOLT 5,(@1)", "CURR 0.1,(@1)", "OUTP 1,(@1)",
                "VOLT 2,(@3)", "CURR 0.4,(@3)", "OUTP 1,(@3)")
    desk.goto(bench.url + "/instruments/psu")
    modes = {ch: desk.locator(f".channel[data-channel='{ch}'] .badge.mode") for ch in "123"}
    assert modes["1"].inner_text() == "CC" and modes["3"].inner_text() == "CV"
    assert modes["2"].count() == 0  # CH2's output is off: no mode to show
    assert modes["1"].get_attribute("title") == "regulation mode"
    ch2 = desk.locator(".channel[data-channel='2']")
    # CH2's current limit is the supply's 1 A default, against an envelope of 0.5 A.
    row = ch2.locator("tr[data-field='current']")
    assert row.get_attribute("class") == "over"
    assert "above the envelope: limit 0.500 A" in row.inner_text()
    assert "1.000 A" in row.inner_text()
    assert row.locator("td").first.evaluate("e => getComputedStyle(e).color") == RED
    assert "OUTSIDE THE ENVELOPE" in ch2.locator("h2").inner_text()
    voltage_row = ch2.locator("tr[data-field='voltage']")
    assert voltage_row.get_attribute("class") is None  # 0 V is inside: not flagged

    # A trend over the last minutes: wait for several live refreshes (every 2 s).
    desk.wait_for_function(
        "Number(document.querySelector(\".channel[data-channel='1'] svg.plot\")"
        ".dataset.samples) >= 3", timeout=TIMEOUT_MS)
    plot = desk.locator(".channel[data-channel='1'] svg.plot").first
    text = plot.text_content() or ""
    # Opened seconds ago: the time axis spans its first minute, in seconds.
    assert "measured voltage (V)" in text and "seconds ago" in text and "−45" in text
    assert re.search(r"\d\.\d{3} V", text), text  # value ticks carry the unit
    assert plot.locator("line.axis").count() == 2
    points = (plot.locator("polyline").get_attribute("points") or "").split()
    xs = [float(p.split(",")[0]) for p in points]
    assert len(xs) >= 3 and xs == sorted(xs) and xs[-1] - xs[0] > 5  # a line, not a dot
    assert "over the last 1 minute: " in (plot.get_attribute("aria-label") or "")
    amps = desk.locator(".channel[data-channel='1'] svg.plot").nth(1).text_content() or ""
    assert "measured current (A)" in amps
    shot(desk, "panel")

    phone.goto(bench.url + "/instruments/psu")
    assert phone.locator(".channel[data-channel='3'] .badge.mode").inner_text() == "CV"
    flagged = phone.locator(".channel[data-channel='2'] tr.over")
    assert flagged.is_visible() and "above the envelope" in flagged.inner_text()
    fits(phone, "the panel")
    shot(phone, "panel-phone")


def test_denials_are_said_once_and_history_names_the_denier(desk: Any, phone: Any,
                                                            bench: Bench) -> None:
    script = Script(bench, "probe CH3")
    held = [script.hold(f"VOLT {v},(@3)") for v in ("1.5", "1.6", "1.7")]
    for i, tk in enumerate(held):
        desk.goto(bench.url + f"/requests/{tk}")
        desk.fill("#deny-form textarea[name=notes]", "not on this DUT")
        desk.click("#deny-button")
        desk.wait_for_selector("#receipt")
        flash = desk.inner_text("p.flash.ok")
        if i < 2:
            assert "suspended" not in flash
    assert "Run suspended after 3 denials in a row" in flash, flash
    article = desk.inner_text("article")
    assert article.count("not on this DUT") == 1, article
    assert "Denied by olga" in desk.inner_text("p.outcome")
    assert "run suspended after 3 denials in a row" in desk.inner_text("#run-suspended")

    desk.goto(bench.url + f"/runs/{script.run}")
    denied = desk.locator("table.waterfall tr.ev-takeover_denied").first.inner_text()
    assert "olga" in denied and "“not on this DUT”" in denied
    assert denied.lower().count("denied") == 1, denied  # the event's name, not again
    suspended = desk.locator("table.waterfall tr.ev-run_suspended").inner_text()
    assert "after 3 denials in a row" in suspended

    desk.goto(bench.url + "/history?outcome=denied")
    row = desk.locator(f"table.history tr[data-id='{held[0]}']")
    assert row.locator("td.by").inner_text() == "olga (denied)"
    stamp = row.locator("time").get_attribute("datetime") or ""
    assert RFC3339_Z.match(stamp), stamp
    desk.goto(bench.url + "/history?approver=olga&outcome=denied")  # the denier is found
    assert desk.locator(f"table.history tr[data-id='{held[0]}']").count() == 1
    desk.goto(bench.url + "/history?approver=denied")  # a name, not the verb beside it
    assert desk.locator(f"table.history tr[data-id='{held[0]}']").count() == 0

    # A long command wraps on a phone: nothing scrolls sideways.
    long = ";:".join(f"VOLT {1 + i / 100:.2f},(@2)" for i in range(12))
    tk = Script(bench, "a long one").hold(long)
    phone.goto(bench.url + f"/requests/{tk}")
    phone.wait_for_selector("#approve-form")
    fits(phone, "a request with a long command")
    shot(phone, "request-long-phone")
    for path in ("/", "/history"):
        phone.goto(bench.url + path)
        fits(phone, path)


def test_docs_redoc_and_favicon_work_offline(browser: Any, bench: Bench) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    left: list[str] = []
    served: list[str] = []

    def local_only(route: Any) -> None:
        url = route.request.url
        if url.startswith(("http://127.0.0.1:", "data:", "blob:")):
            served.append(url)
            route.continue_()
        else:
            left.append(url)
            route.abort()

    context.route("**/*", local_only)
    try:
        pg = context.new_page()
        pg.set_default_timeout(TIMEOUT_MS)
        docs = pg.goto(bench.url + "/docs")
        # The page itself may load nothing from elsewhere, whatever a bundle would fetch.
        assert "default-src 'self'" in docs.headers["content-security-policy"]
        pg.wait_for_selector(".swagger-ui .info .title")
        assert "bench-gate" in pg.inner_text(".swagger-ui .info .title")
        assert pg.locator(".opblock").count() > 10  # the operations rendered
        shot(pg, "docs", full=False)
        redoc = pg.goto(bench.url + "/redoc")
        assert "default-src 'self'" in redoc.headers["content-security-policy"]
        pg.wait_for_selector("h1")
        assert "bench-gate" in pg.inner_text("h1")
        assert pg.locator("[data-section-id]").count() > 10
        favicon = pg.request.get(bench.url + "/favicon.ico")
        assert favicon.status == 200 and favicon.headers["content-type"] == "image/png"
        assert favicon.body().startswith(b"\x89PNG")
        pg.goto(bench.url + "/login")
        icon = pg.locator("link[rel=icon]").first.get_attribute("href") or ""
        assert pg.request.get(bench.url + icon).status == 200
    finally:
        context.close()
    assert left == [], f"requests left 127.0.0.1: {left}"
    assert any(u.endswith("/docs-assets/swagger-ui-bundle.js") for u in served), served
    assert any(u.endswith("/docs-assets/redoc.standalone.js") for u in served), served
