"""The console, in Chromium: an operator clears an emergency stop from the stop bar (a
requester sees the stop but gets no such control, and is refused if it posts the form
anyway), and each instrument shows whether it is locked to the gateway, with the warning on
every page when it is not (issue 17, sections 1 and 2)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench_gate.locking import UNLOCKED_WARNING
from tests._browser import PHONE, shot, sign_in
from tests._http_bench import Bench, start_bench
from tests.core.test_emergency_stop import switch_on


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    """The simulated bench served, plus ``aux``, an instrument the gateway cannot lock."""
    yield from start_bench(tmp_path, unlockable=True)


def stopped(bench: Bench) -> dict[str, Any]:
    with bench.http("bot") as h:
        found: dict[str, Any] = h.get("/v1/bench/stop").json()["stopped"]
        return found


def test_an_operator_clears_the_stop_in_the_console_a_requester_cannot(
        browser: Any, bench: Bench) -> None:
    switch_on(bench)
    bot = sign_in(browser, bench, "bot", PHONE)
    try:
        bot.click("#emergency-stop")
        bot.wait_for_selector("p.flash.error")
        assert int(bench.psu("OUTP? (@1)")) == 0
        assert set(stopped(bench)) == {"psu", "dmm", "aux"}
        assert "STOPPED: aux, dmm, psu" in bot.inner_text("#stopped")
        assert bot.locator("#clear-stop").count() == 0, "no clear control for a requester"
        # Posting the operator's form anyway (same origin, the page's own CSRF token).
        csrf = bot.locator("form.estop input[name=csrf]").first.get_attribute("value")
        status = bot.evaluate("""async (csrf) => {
            const body = new URLSearchParams({csrf});
            const r = await fetch('/stop/clear', {method: 'POST', body});
            return r.status; }""", csrf)
        assert status == 403
        assert set(stopped(bench)) == {"psu", "dmm", "aux"}
    finally:
        bot.context.close()
    olga = sign_in(browser, bench, "olga")
    try:
        for path in ("/", "/history", "/instruments/psu"):
            olga.goto(bench.url + path)
            assert olga.locator("#clear-stop").is_visible(), path
        shot(olga, "console-stop-clear-before", full=False)
        olga.click("#clear-stop")
        olga.wait_for_selector("p.flash.ok")
        assert "Stop cleared by olga: aux, dmm, psu" in olga.inner_text("p.flash.ok")
        assert olga.locator("#stopped").count() == 0
        assert olga.locator("#clear-stop").count() == 0
        assert olga.locator("#emergency-stop").is_visible()
    finally:
        olga.context.close()
    assert stopped(bench) == {}
    with bench.http("bot") as h:  # writes are judged again: held, not refused
        run = h.post("/v1/runs", json={"kind": "script"}).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                  "command": "VOLT 1,(@2)"})
        assert r.status_code == 202, r.text


def test_each_instrument_shows_whether_it_is_locked(browser: Any, bench: Bench) -> None:
    pg = sign_in(browser, bench, "bot")
    try:
        badge = pg.locator("nav .unlocked")
        assert badge.count() == 1 and badge.get_attribute("data-instrument") == "aux"
        assert UNLOCKED_WARNING in (badge.get_attribute("title") or "")
        pg.goto(bench.url + "/instruments/psu")
        line = pg.locator("#instrument-lock")
        assert line.get_attribute("data-lock") == "locked"
        assert "Locked to the gateway" in line.inner_text()
        pg.goto(bench.url + "/instruments/aux")
        line = pg.locator("#instrument-lock")
        assert line.get_attribute("data-lock") == "not lockable"
        assert f"not lockable: {UNLOCKED_WARNING}" in line.inner_text()
        shot(pg, "console-instrument-not-lockable", full=False)
        assert pg.locator("nav .unlocked").is_visible(), "the warning is on every page"
    finally:
        pg.context.close()
