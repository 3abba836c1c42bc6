"""A hostile review of the doors a person decides through (the console, the HTTP API, MCP
and the CLI's client): what a requester or a mistaken paste could make them show or do.

Each test failed before its fix, against a real server on the simulated bench:
- a plan's number written out as a billion digits (``maxStep: "1e-999999999"``, a 30-byte
  body): the server built a 1 GB string; ``1e-9999999`` was filed, an 80 MB answer and a
  10 MB queue page for every operator, per plan;
- the console's queue at ``?offset=`` 30 nines: 500 (an integer the store cannot hold);
- an id prefix of 25,000 ``!``: 503 "store error: LIKE or GLOB pattern too complex";
- a token pasted where an id goes: echoed whole in the 404 of every door.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench_gate.errors import InvalidInput
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.plans import PLACES, PlanScope, number_problem, scope_words

from .._http_bench import Bench, start_bench

CSRF = re.compile(r'name="csrf" value="([^"]+)"')
SCOPE: dict[str, Any] = {"instrument": "psu", "channels": [1], "voltage": ["0", "2"],
                         "currentMax": "0.2", "maxStep": "0.5", "maxWrites": 5,
                         "timeoutMinutes": 30}


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("people-doors"))


def a_run(bench: Bench, who: str = "bot") -> str:
    with bench.http(who) as h:
        r = h.post("/v1/runs", json={"kind": "script", "goal": "hostile review"})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])


@contextmanager
def signed_in(bench: Bench, who: str = "olga") -> Iterator[httpx.Client]:
    """A console client signed in as ``who``."""
    with httpx.Client(base_url=bench.url, timeout=30, follow_redirects=False) as c:
        found = CSRF.search(c.get("/login").text)
        assert found
        r = c.post("/login", data={"csrf": found.group(1), "token": bench.tokens[who],
                                   "next": "/"})
        assert r.status_code == 303, r.text
        yield c


# -- a plan's numbers ----------------------------------------------------------------


@pytest.mark.parametrize(("change", "field"), [
    ({"maxStep": "1e-999999999"}, "maxStep"),   # a billion digits: 1 GB, then a 500
    ({"maxStep": "1e-99999"}, "maxStep"),       # filed: an 800 KB answer
    ({"voltage": ["1e-99999", "1"]}, "voltage"),
    ({"currentMax": "0.1000000000001"}, "currentMax"),  # 13 places
])
def test_a_plan_number_a_person_cannot_read_is_refused(bench: Bench, change: dict[str, Any],
                                                       field: str) -> None:
    run = a_run(bench)
    with bench.http("bot") as h:
        r = h.post(f"/v1/runs/{run}/plans", json={**SCOPE, **change})
        assert r.status_code == 422, r.text[:300]
        assert len(r.content) < 4000, "the refusal does not write the number out"
        assert r.json()["errors"][0]["loc"] == ["body", field], r.json()
        assert f"at most {PLACES} decimal places" in r.json()["reason"]
    with bench.http("olga") as o:
        queue = o.get("/v1/takeover", params={"status": "pending"}).json()
        assert not [t for t in queue if t["runId"] == run], "nothing was filed"


async def test_a_plan_through_the_core_refuses_it_too(gateway: Gateway,
                                                      script: Principal) -> None:
    """MCP's request_plan and the socket door's GATE:PLAN reach the same core call (MCP's
    schema has no upper bound at all: ``voltage_max`` of 1e999999999 was taken)."""
    run = gateway.create_run(script, "script", goal="plans")
    for scope in ({"voltage": [0, Decimal("1e999999999")]},
                  {"max_step": Decimal("1e-999999999")},
                  {"current_max": Decimal("0.5"), "voltage": [Decimal("1e-13"), 1]}):
        with pytest.raises(InvalidInput, match="not a bench number"):
            await gateway.request_plan(run.id, {
                "instrument": "psu", "channels": [1], "voltage": [0, 1], "current_max": 0.1,
                "max_writes": 3, **scope}, rationale="x")


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.decimals(allow_nan=True, allow_infinity=True))
def test_every_plan_number_taken_reads_as_a_short_line(value: Decimal) -> None:
    """For any number at all: either it is refused, or every line of the scope a person
    reads (and the digest) stays short."""
    for scope in ({"voltage": [Decimal(0), value], "current_max": Decimal("0.1")},
                  {"voltage": [Decimal(0), Decimal(1)], "current_max": value},
                  {"voltage": [Decimal(0), Decimal(1)], "current_max": Decimal("0.1"),
                   "max_step": value}):
        try:
            plan = PlanScope.model_validate({"instrument": "psu", "channels": [1],
                                             "max_writes": 1, **scope})
        except ValueError:
            continue  # the model refuses it (negative, a step of 0...)
        if number_problem(plan) is not None:
            continue
        assert all(len(line) < 200 for line in scope_words(plan))
        assert len(plan.digest()) == 64


# -- the console's queue and ids -------------------------------------------------------


def test_the_console_queue_past_every_row_is_an_empty_page(bench: Bench) -> None:
    with signed_in(bench) as c:
        for offset in ("9" * 30, str(2**63), str(2**62)):
            for path in ("/", "/fragments/queue"):
                r = c.get(path, params={"offset": offset})
                assert r.status_code == 200, (path, offset, r.text[:200])


def test_an_id_prefix_longer_than_any_id_is_not_found(bench: Bench) -> None:
    with bench.http("olga") as o:
        for prefix in ("tk-" + "!" * 25_000, "tk-" + "a" * 30_000, "t" * 65):
            r = o.get(f"/v1/takeover/{prefix}")
            assert r.status_code == 404, r.text[:300]
            assert len(r.content) < 2000, "the 404 does not quote 25 KB back"


# -- a token where an id goes ------------------------------------------------------------


def test_a_token_pasted_as_an_id_is_never_echoed(bench: Bench) -> None:
    secret = bench.tokens["olga"]
    run = a_run(bench)
    with bench.http("olga") as o:
        for method, path, body in (
                ("GET", f"/v1/takeover/{secret}", None),
                ("GET", f"/v1/runs/{secret}", None),
                ("GET", f"/v1/runs/{secret}/journal", None),
                ("GET", f"/v1/questions/{secret}", None),
                ("POST", f"/v1/runs/{run}/takeover/{secret}/grant",
                 {"approve": ["setpoint"], "proposalHash": "0" * 64}),
                ("POST", f"/v1/runs/{run}/takeover/tk-x/grant",
                 {"approve": ["setpoint"], "proposalHash": "0" * 64,
                  "edits": {secret: 5}})):
            r = o.request(method, path, json=body)
            assert r.status_code in (404, 422), (path, r.text[:300])
            assert secret not in r.text, (path, r.text[:300])
            assert secret[:19] not in r.text, path
    with bench.http("bot") as h:
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": secret, "command": "*IDN?"})
        assert r.status_code == 404 and secret[:19] not in r.text, r.text
    with signed_in(bench) as c:
        for path in (f"/requests/{secret}", f"/runs/{secret}", f"/questions/{secret}",
                     f"/instruments/{secret}"):
            r = c.get(path)
            assert r.status_code == 404, (path, r.status_code)
            assert secret[:19] not in r.text, path


# -- the console's decision form ---------------------------------------------------------


def test_a_decision_form_with_any_shown_state_is_answered_not_a_500(bench: Bench) -> None:
    """``shown_live`` is the live state the page showed; a form holding anything else was
    a 500 (a list, a string: ``.get`` on it; 100,000 brackets: RecursionError). Now it is
    the page again, nothing approved."""
    run = a_run(bench)
    with bench.http("bot") as h:
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu", "command": "VOLT 1,(@1)"})
        assert r.status_code == 202, r.text
        tk = r.json()["takeover"]["id"]
    with signed_in(bench) as c:
        page = c.get(f"/requests/{tk}").text
        csrf = CSRF.search(page)
        shown_hash = re.search(r'name="shown_hash" value="([^"]+)"', page)
        assert csrf and shown_hash
        for live in ("[1]", '"abc"', "[" * 100_000 + "]" * 100_000, '{"zz": "1"}',
                     '{"ch1.voltage": {"a": 1}}', "1e999", "null"):
            r = c.post(f"/requests/{tk}/approve", data={
                "csrf": csrf.group(1), "shown_hash": shown_hash.group(1),
                "shown_live": live, "kind": "setpoint"})
            assert r.status_code == 409, (live[:20], r.status_code, r.text[:300])
            assert "Nothing was approved" in r.text
    with bench.http("olga") as o:
        assert o.get(f"/v1/takeover/{tk}").json()["status"] == "pending"
