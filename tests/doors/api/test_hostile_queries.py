"""Query strings: a parameter the route does not take is a 422 problem naming it, never
ignored (``GET /v1/runs?status=pending`` listed every run, ``?cursor=`` gave the first page
again, ``POST .../scpi?dryRun=1`` held a real write); a taken one out of range is a 422 too.
Every operation of the OpenAPI document is tried, so a new route is covered."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..._http_bench import Bench, start_bench

PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("hostile-queries"))


def test_an_unknown_query_parameter_is_refused_on_every_operation(bench: Bench) -> None:
    with bench.http("ada") as h:
        run = h.post("/v1/runs", json={"kind": "script", "goal": "queries"}).json()["id"]
        paths = h.get("/openapi.json").json()["paths"]
        tried = 0
        for path, ops in paths.items():
            if not path.startswith("/v1/") or path == "/v1/events":
                continue
            for method in ops:
                url = path.replace("{run_id}", run).replace("{", "").replace("}", "")
                # Each has a name no route takes (names are case-sensitive: LIMIT).
                for query in ("cursor=garbage", "dryRun=1", "status=pending&bogus=",
                              "limit=1&LIMIT=2"):
                    r = h.request(method.upper(), f"{url}?{query}")
                    assert r.status_code == 422, (method, path, query, r.status_code, r.text)
                    assert r.headers["content-type"].startswith(PROBLEM), r.headers
                    assert "takes no query parameter" in r.json()["reason"], r.text
                    tried += 1
        assert tried > 60
        # Nothing was made by any of them: the run holds no request, no plan.
        assert h.get(f"/v1/runs/{run}/takeover").json() == []
        assert h.get(f"/v1/runs/{run}/plans").json() == []
    assert float(bench.psu("VOLT? (@1)")) == 0.0


def test_a_write_with_an_unknown_query_parameter_holds_nothing(bench: Bench) -> None:
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "script", "goal": "dry run"}).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi?dryRun=true",
                   json={"instrument": "psu", "command": "VOLT 2,(@1)"})
        assert r.status_code == 422 and "dryRun" in r.json()["reason"], r.text
        assert h.get(f"/v1/runs/{run}/takeover").json() == []
        # The parameters a route takes still work.
        r = h.post(f"/v1/runs/{run}/scpi?wait=0",
                   json={"instrument": "psu", "command": "MEAS:VOLT? (@1)"})
        assert r.status_code == 200, r.text
        assert h.get("/v1/runs?limit=1&offset=0").status_code == 200
        assert h.get(f"/v1/runs/{run}/journal?after=0&limit=5").status_code == 200


@pytest.mark.parametrize("query", ["limit=-1", "limit=1e9", "limit=abc", "limit=",
                                   "offset=-5", "offset=1e400", "limit=NaN",
                                   "offset=99999999999999999999999"])
def test_a_paging_parameter_out_of_range_is_a_problem(bench: Bench, query: str) -> None:
    with bench.http("olga") as h:
        for path in ("/v1/runs", "/v1/takeover", "/v1/questions"):
            r = h.get(f"{path}?{query}")
            assert r.status_code == 422, (path, query, r.text)
            assert r.headers["content-type"].startswith(PROBLEM)
