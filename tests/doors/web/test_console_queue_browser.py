"""The console's queue under a flood, in real headless Chromium: 3,000 held writes from one
requester behind a legitimate one. The queue pages, says how many wait in all, sorts by
expiry by default (so the earlier request is on page 1) or by newest, and keeps its page and
order when it updates live. Skips without chromium or playwright, as test_console_browser."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from ..._browser import ARTIFACTS, sign_in
from ..._flood import flood, hold
from ..._http_bench import Bench, start_bench

FLOOD = 3000


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("console-flood"),
                           limits={"pending_requests": FLOOD + 100})


@pytest.fixture(scope="module")
def page(browser: Any, bench: Bench) -> Iterator[Any]:
    """Olga, an operator, signed in through the sign-in form."""
    pg = sign_in(browser, bench)
    yield pg
    pg.context.close()


def first_row(pg: Any) -> str:
    return str(pg.locator("tr.req").first.get_attribute("data-id"))


def test_the_queue_pages_counts_and_keeps_an_earlier_request_in_sight(
        page: Any, bench: Bench) -> None:
    pg = page
    _, legit = hold(bench, "bot2", "VOLT 2.5,(@1)", "the legitimate one")
    flood(bench, "bot", FLOOD)
    total = FLOOD + 1

    pg.goto(bench.url + "/")
    assert first_row(pg) == legit  # soonest expiry first: it is not buried
    assert pg.locator("tr.req").count() == 100
    summary = pg.inner_text("#queue-summary")
    assert f"Showing 1–100 of {total} pending, soonest expiry first" in summary
    assert pg.inner_text("#pending-count") == str(total)
    assert pg.title().startswith(f"({total})")
    pg.screenshot(path=str(ARTIFACTS / "queue-flood-expiry.png"), full_page=False)

    pg.click("nav.pager a[data-sort=newest]")
    pg.wait_for_url(re.compile(r"/\?sort=newest$"))
    assert pg.locator(f"tr[data-id='{legit}']").count() == 0  # newest first: far back
    assert f"of {total} pending, newest first" in pg.inner_text("#queue-summary")
    pg.click("nav.pager a[rel=next]")
    pg.wait_for_url(re.compile(r"/\?sort=newest&offset=100$"))
    assert f"Showing 101–200 of {total}" in pg.inner_text("#queue-summary")
    assert pg.locator("nav.pager a[rel=prev]").count() == 1
    pg.goto(bench.url + f"/?sort=newest&offset={total - 1}")  # the last page
    assert first_row(pg) == legit and pg.locator("nav.pager a[rel=next]").count() == 0

    # Live: a decision elsewhere updates the count and rows, on the same page and order.
    pg.goto(bench.url + "/?sort=expiry")
    pg.wait_for_selector("#live-dot.on")
    with bench.http("oscar") as h:
        shown = h.get(f"/v1/takeover/{legit}").json()
        denied = h.post(f"/v1/runs/{shown['runId']}/takeover/{legit}/deny",
                        json={"notes": "not now", "proposalHash": shown["proposalHash"]})
        assert denied.status_code == 200, denied.text
    pg.wait_for_function(f"document.getElementById('queue-total').textContent === "
                         f"'{total - 1}'")
    assert pg.locator(f"tr[data-id='{legit}']").count() == 0
    assert pg.inner_text("#pending-count") == str(total - 1)
    assert pg.url.endswith("/?sort=expiry")
