"""The console's cookie session carries its token's id: an approval given through the
console form is withdrawn when that token is revoked on the store by another process, and
the simulator's own port shows nothing written."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from bench_gate.auth import Tokens
from bench_gate.store import open_store

from ..._http_bench import Bench, shown_hash, start_bench
from .test_console_http import HASH, LIVE, held, sign_in


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("console-revoked"))


def test_a_console_approval_dies_with_the_sessions_token(bench: Bench) -> None:
    with bench.http("ada") as h:
        r = h.post("/v1/tokens", json={"name": "cora", "role": "operator"})
        assert r.status_code == 201, r.text
        bench.tokens["cora"] = str(r.json()["token"])
    before = bench.psu("VOLT? (@1)"), bench.psu("OUTP? (@1)")
    run, tk = held(bench, "VOLT 4.1,(@1);:OUTP ON,(@1)")
    c, csrf = sign_in(bench, "cora")
    page = c.get(f"/requests/{tk}").text
    shown, live = HASH.search(page), LIVE.search(page)
    assert shown and live
    ok = c.post(f"/requests/{tk}/approve", data={
        "csrf": csrf, "kind": "setpoint", "shown_hash": shown.group(1),
        "shown_live": live.group(1).replace("&#34;", '"')})
    assert ok.status_code == 303, ok.text
    with bench.http("olga") as h:
        given = h.get(f"/v1/takeover/{tk}").json()["approvalsGiven"]
        assert [a["by"] for a in given] == ["cora"], given
    store = open_store(bench.db)  # as `bench-gate token revoke cora` on the store
    try:
        assert Tokens(store).revoke("cora") == 1
    finally:
        store.close()
    deadline = time.monotonic() + 5
    with bench.http("olga") as h:
        while h.get(f"/v1/takeover/{tk}").json()["approvalsGiven"]:
            assert time.monotonic() < deadline, "the console approval still counts"
            time.sleep(0.05)
    with bench.http("oscar") as h:
        r = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                   json={"approve": ["output_enable"], "proposalHash": shown_hash(h, tk)})
        assert r.status_code == 200, r.text
        assert r.json()["missing"] == ["setpoint"], r.json()
    assert (bench.psu("VOLT? (@1)"), bench.psu("OUTP? (@1)")) == before
    c.close()
