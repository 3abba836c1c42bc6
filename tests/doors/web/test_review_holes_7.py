"""The console's receipt tells what the gateway added or kept back, and why
(docs/reliability.md section 7): ``*CLS;VOLT 2.5,(@2)`` executed; ``*CLS`` is answered by
the gateway and never sent, and the page says so beside what was sent."""

from __future__ import annotations

import html
from collections.abc import Iterator

import pytest

from ..._http_bench import Bench, shown_hash, start_bench
from .test_console_http import held, sign_in


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("console7"))


def test_the_receipt_says_what_the_gateway_kept_back(bench: Bench) -> None:
    run, tk = held(bench, "*CLS;VOLT 2.5,(@2)")
    with bench.http("olga") as h:
        r = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                   json={"approve": ["setpoint"], "proposalHash": shown_hash(h, tk)})
        assert r.status_code == 200, r.text
        receipt = r.json()["request"]["receipt"]
    assert receipt["sent"] == ["VOLT 2.5,(@2)"]
    assert receipt["lines"][0]["text"] == "*CLS" and not receipt["lines"][0]["sent"]
    c, _ = sign_in(bench, "olga")
    try:
        page = html.unescape(c.get(f"/requests/{tk}").text)
    finally:
        c.close()
    assert 'id="sent-notes"' in page
    assert "<code>*CLS</code>: not sent: answered by the gateway" in page
    assert "Sent: <code>VOLT 2.5,(@2)</code>" in page
