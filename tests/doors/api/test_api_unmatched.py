"""Every answer under ``/v1`` is a problem (RFC 9457), whatever the method or the path.

The finding: the console is mounted at ``/`` after the API, so a ``/v1`` route asked with a
method it does not take (``GET .../takeover/{tk}/grant``, ``POST /v1/takeover/{tk}``,
``PUT /v1/runs/{id}``) or a ``/v1`` path that is no route fell through to the console and
got its HTML page "404 · bench": a client deciding over HTTP read a page meant for a
browser, and a route that exists answered as if it did not. Now the path with another
method is a 405 problem with ``Allow``, and an unknown ``/v1`` path a 404 problem; nothing
is decided (the simulator's own port).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..._http_bench import Bench, shown_hash, start_bench


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("unmatched"))


def test_a_route_asked_with_another_method_is_a_405_problem(bench: Bench) -> None:
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "script", "goal": "methods"}).json()["id"]
        held = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                   "command": "VOLT 4,(@1)"})
        assert held.status_code == 202, held.text
        tk = held.json()["takeover"]["id"]
    with bench.http("olga") as h:
        seen = shown_hash(h, tk)
        for method, path, allowed in (
                ("GET", f"/v1/runs/{run}/takeover/{tk}/grant", "POST"),
                ("PUT", f"/v1/runs/{run}/takeover/{tk}/grant", "POST"),
                ("GET", f"/v1/runs/{run}/takeover/{tk}/deny", "POST"),
                ("POST", f"/v1/takeover/{tk}", "GET"),
                ("DELETE", f"/v1/takeover/{tk}", "GET"),
                ("PUT", f"/v1/runs/{run}", "GET")):
            r = h.request(method, path, json={"approve": ["setpoint"], "proposalHash": seen})
            assert r.status_code == 405, (method, path, r.status_code, r.text[:200])
            assert r.headers["content-type"].startswith("application/problem+json"), r.text
            assert allowed in r.headers["allow"].split(", "), r.headers
            assert r.json()["status"] == 405 and method in r.json()["detail"]
        r = h.get(f"/v1/takeover/{tk}")
        assert r.json()["status"] == "pending" and not r.json()["approvalsGiven"]
    assert float(bench.psu("VOLT? (@1)")) == 0


@pytest.mark.parametrize("path", ["/v1/nothing", "/v1/takeover/tk-1/nothing", "/v1/", "/v1",
                                  "/v1/runs/run-1/takeover/tk-1/grant/again"])
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_an_unknown_api_path_is_a_404_problem(bench: Bench, path: str, method: str) -> None:
    with bench.http("olga") as h:
        r = h.request(method, path)
    assert r.status_code == 404, r.text[:200]
    assert r.headers["content-type"].startswith("application/problem+json"), r.text[:200]
    assert r.json()["status"] == 404


def test_the_console_keeps_its_own_pages(bench: Bench) -> None:
    """Outside /v1 nothing changes: the console's pages, its 404 page included."""
    with bench.http(None) as h:
        assert h.get("/healthz").status_code == 200
        r = h.get("/no-such-page")
    assert r.status_code in (303, 404) and "problem" not in r.headers.get("content-type", "")
