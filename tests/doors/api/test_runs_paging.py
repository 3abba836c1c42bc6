"""``GET /v1/runs`` filters before paging (issue 15): a requester sees its own runs among
hundreds of others', because the store filters in its query, not after LIMIT/OFFSET.
Against a real server on the simulated bench."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..._http_bench import Bench, start_bench


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("runs-paging"))


def test_a_requester_finds_its_runs_among_300_of_others(bench: Bench) -> None:
    with bench.http("bot") as h:
        first = h.post("/v1/runs", json={"kind": "agent", "goal": "mine, filed first"})
        assert first.status_code == 201, first.text
    with bench.http("bot2") as h:
        for i in range(300):
            r = h.post("/v1/runs", json={"kind": "script", "goal": f"someone else's {i}"})
            assert r.status_code == 201, r.text
    with bench.http("bot") as h:
        last = h.post("/v1/runs", json={"kind": "agent", "goal": "mine, filed last"})
        page = h.get("/v1/runs")  # the first page, 100 runs at most
        assert page.status_code == 200, page.text
        assert [r["id"] for r in page.json()] == [last.json()["id"], first.json()["id"]]
        assert {r["principal"] for r in page.json()} == {"bot"}
        second = h.get("/v1/runs", params={"limit": 1, "offset": 1}).json()
        assert [r["id"] for r in second] == [first.json()["id"]]
    with bench.http("bot2") as h:
        theirs = h.get("/v1/runs", params={"limit": 1000}).json()
        assert len(theirs) == 300 and {r["principal"] for r in theirs} == {"bot2"}
    with bench.http("olga") as h:  # an operator sees every run, newest first
        everyone = h.get("/v1/runs", params={"limit": 5}).json()
        assert everyone[0]["id"] == last.json()["id"] and len(everyone) == 5
