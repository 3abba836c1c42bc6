"""Hostile JSON bodies on the routes that write: a value of the wrong JSON type (``true`` for a
number, ``1`` or ``"yes"`` for a boolean, ``"5"`` for a count), a key given twice, a key the
route does not take. Each is a problem with a reason (400 or 422) naming what is wrong, and
nothing is made: no request held, no plan, no token, no feedback recorded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ..._http_bench import Bench, start_bench, suspended_run

PROBLEM = "application/problem+json"
PLAN: dict[str, Any] = {"instrument": "psu", "channels": [1], "voltage": [0, 2],
                        "currentMax": 0.2, "maxStep": 0.5, "outputEnable": False,
                        "maxWrites": 3, "timeoutMinutes": 30, "rationale": "ramp CH1"}
#: Each field of a plan's scope, and JSON values of another type than the one it takes
#: (a decimal may be a JSON number or a decimal string; nothing else).
WRONG: dict[str, list[Any]] = {
    "channels": [[True], ["1"], [1.5], 1, [[1]]],
    "voltage": [[True, 2], [0, False], "0-2", [0, {}]],
    "currentMax": [True, [0.2], {}],
    "maxStep": [True, [], {}],
    "outputEnable": [1, 0, "true", "yes", "on", 1.0, None],
    "maxWrites": [True, "3", 3.5, [3], None],
    "timeoutMinutes": [True, "30", 30.5, None],
    "instrument": [1, True, None, ["psu"]],
    "rationale": [1, True, ["r"]],
}


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("hostile-bodies"))


@pytest.fixture(scope="module")
def run(bench: Bench) -> str:
    with bench.http("bot") as h:
        r = h.post("/v1/runs", json={"kind": "script", "goal": "hostile bodies"})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])


def refused(r: httpx.Response, *statuses: int) -> dict[str, Any]:
    assert r.status_code in statuses, (r.status_code, r.text)
    assert r.headers["content-type"].startswith(PROBLEM), r.headers
    body: dict[str, Any] = r.json()
    assert body["reason"], body
    return body


def requests_of(h: httpx.Client, run: str) -> list[str]:
    r = h.get(f"/v1/runs/{run}/takeover", params={"limit": 1000})
    assert r.status_code == 200, r.text
    return [str(t["id"]) for t in r.json()]


def raw(h: httpx.Client, path: str, text: str) -> httpx.Response:
    return h.post(path, content=text.encode(), headers={"content-type": "application/json"})


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(case=st.sampled_from([(k, v) for k, vs in WRONG.items() for v in vs]))
def test_a_plan_field_of_the_wrong_json_type_is_refused_and_makes_nothing(
        bench: Bench, run: str, case: tuple[str, Any]) -> None:
    field, value = case
    with bench.http("bot") as h:
        before = requests_of(h, run)
        body = refused(h.post(f"/v1/runs/{run}/plans", json={**PLAN, field: value}), 422)
        assert field in body["reason"], body
        assert h.get(f"/v1/runs/{run}/plans").json() == []
        assert requests_of(h, run) == before


@pytest.mark.parametrize(("field", "value"), [
    ("timeoutMinutes", "5"), ("timeoutMinutes", True), ("timeoutMinutes", 5.5),
    ("confidence", True), ("confidence", "0.5"), ("instrument", 1), ("command", True)])
def test_a_submit_field_of_the_wrong_json_type_holds_nothing(bench: Bench, run: str,
                                                            field: str, value: Any) -> None:
    with bench.http("bot") as h:
        before = requests_of(h, run)
        body = refused(h.post(f"/v1/runs/{run}/scpi", json={
            "instrument": "psu", "command": "VOLT 1.5,(@1)", "rationale": "r", field: value}),
            422)
        assert field in body["reason"], body
        assert requests_of(h, run) == before
    assert float(bench.psu("VOLT? (@1)")) == 0.0


def test_feedback_and_questions_of_the_wrong_json_type_are_refused(bench: Bench,
                                                                   run: str) -> None:
    with bench.http("olga") as o:
        open_before = o.get("/v1/questions").json()
    with bench.http("bot") as h:
        for score in (True, False, "5", 4.0):
            body = refused(h.post(f"/v1/runs/{run}/feedback",
                                  json={"stepId": "s1", "score": score}), 422)
            assert "score" in body["reason"], body
        question = {"text": "which?", "options": [{"label": "a"}, {"label": "b"}]}
        for free in (1, "yes", "true"):
            body = refused(h.post(f"/v1/runs/{run}/questions", json={
                "questions": [{**question, "allowFreeText": free}]}), 422)
            assert "allowFreeText" in body["reason"], body
        refused(h.post(f"/v1/runs/{run}/questions", json={
            "questions": [question], "timeoutMinutes": "5"}), 422)
    with bench.http("olga") as o:
        assert o.get("/v1/questions").json() == open_before


def test_a_token_body_with_an_unknown_key_makes_no_token(bench: Bench) -> None:
    """``expiresIn`` is not a thing here: a token that was meant to expire must not be made
    one that never does."""
    with bench.http("ada") as h:
        names = {t["name"] for t in h.get("/v1/tokens").json()}
        for extra in ({"expiresIn": "1h"}, {"scope": "psu"}, {"instrument": "psu"}):
            body = refused(h.post("/v1/tokens", json={"name": "temp", "role": "requester",
                                                      **extra}), 422)
            assert next(iter(extra)) in body["reason"], body
        assert {t["name"] for t in h.get("/v1/tokens").json()} == names


@pytest.mark.parametrize(("path", "text"), [
    ("/v1/tokens", '{"name": "dup", "role": "requester", "role": "admin"}'),
    ("/v1/runs/{run}/scpi",
     '{"instrument": "psu", "command": "MEAS:VOLT? (@1)", "command": "VOLT 5,(@1)"}'),
    ("/v1/runs/{run}/scpi",
     '{"instrument": "dmm", "instrument": "psu", "command": "VOLT 5,(@1)"}'),
    ("/v1/runs/{run}/plans", json.dumps(PLAN)[:-1] + ', "outputEnable": true}'),
    ("/v1/runs/{run}/questions",
     '{"questions": [{"text": "q", "options": [{"label": "a", "label": "c"},'
     ' {"label": "b"}]}]}'),
    ("/v1/runs", '{"kind": "script", "goal": "a", "goal": "b"}'),
])
def test_a_key_given_twice_is_refused_not_read_as_its_last_value(
        bench: Bench, run: str, path: str, text: str) -> None:
    """JSON does not say which of two values of one key counts; a proxy, a log or a person
    reading the body may take the first, the gateway the last. Nothing is made."""
    who = "ada" if path == "/v1/tokens" else "bot"
    with bench.http(who) as h:
        before = requests_of(h, run)
        runs = len(h.get("/v1/runs", params={"limit": 1000}).json())
        tokens = len(bench.http("ada").get("/v1/tokens").json())
        body = refused(raw(h, path.format(run=run), text), 400)
        assert "twice" in body["reason"], body
        assert requests_of(h, run) == before
        assert h.get(f"/v1/runs/{run}/plans").json() == []
        assert len(h.get("/v1/runs", params={"limit": 1000}).json()) == runs
        assert len(bench.http("ada").get("/v1/tokens").json()) == tokens


def test_a_grant_with_a_key_given_twice_decides_nothing(bench: Bench, run: str) -> None:
    with bench.http("bot") as h:
        held = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                     "command": "VOLT 1.25,(@1)"})
        assert held.status_code == 202, held.text
        tk = held.json()["takeover"]
    with bench.http("olga") as o:
        seen = json.dumps(tk["proposalHash"])
        text = (f'{{"approve": ["setpoint"], "proposalHash": {seen}, "edits": '
                '{"CH1.voltage": "1.25", "CH1.voltage": "4"}}')
        refused(raw(o, f"/v1/runs/{run}/takeover/{tk['id']}/grant", text), 400)
        assert o.get(f"/v1/takeover/{tk['id']}").json()["status"] == "pending"
        # The same body once, with one value: decided as usual.
        ok = o.post(f"/v1/runs/{run}/takeover/{tk['id']}/deny",
                    json={"notes": "not now", "proposalHash": tk["proposalHash"]})
        assert ok.status_code == 200, ok.text
    assert float(bench.psu("VOLT? (@1)")) == 0.0


def test_bodies_with_each_key_once_are_read_as_before(bench: Bench, run: str) -> None:
    """A body with each key once is read as before, nested objects and arrays included."""
    with bench.http("bot") as h:
        r = raw(h, f"/v1/runs/{run}/scpi",
                '{"instrument": "psu", "command": "MEAS:VOLT? (@1)", "rationale": "a"}')
        assert r.status_code == 200, r.text
        r = raw(h, f"/v1/runs/{run}/questions",
                '{"questions": [{"text": "q", "options": [{"label": "a"}, {"label": "b"}]}]}')
        assert r.status_code in (200, 201, 202), r.text


def test_a_body_on_a_route_that_takes_none_is_refused_before_anything(bench: Bench) -> None:
    """A release, a revoke, a token's deletion and a heartbeat take no body: one sent (a
    reason, notes) would be dropped without a word, so it is refused, before the ids are
    even looked up. Every such route of the OpenAPI document is tried."""
    with bench.http("ada") as h:
        paths = h.get("/openapi.json").json()["paths"]
        bodiless = [(method.upper(), path) for path, ops in paths.items()
                    for method, op in ops.items()
                    if method in ("post", "put", "patch", "delete") and "requestBody" not in op]
        assert len(bodiless) >= 5, bodiless
        for method, path in bodiless:
            url = path.replace("{", "").replace("}", "")  # ids that are nowhere
            r = h.request(method, url, json={"reason": "why"})
            body = refused(r, 422)
            assert "no body" in body["reason"], (method, path, body)
            empty = h.request(method, url)  # the same without a body: the route's answer
            assert empty.status_code in (404, 409), (method, path, empty.text)


def test_a_release_or_a_token_deletion_with_a_body_changes_nothing(bench: Bench) -> None:
    run, _ = suspended_run(bench, "bot2", "olga")
    with bench.http("olga") as o:
        refused(o.post(f"/v1/runs/{run}/release", json={"notes": "go on"}), 422)
        assert o.get(f"/v1/runs/{run}").json()["status"] == "suspended"
        assert o.post(f"/v1/runs/{run}/release").status_code == 200
    with bench.http("ada") as a:
        made = a.post("/v1/tokens", json={"name": "kept", "role": "requester"}).json()
        refused(a.request("DELETE", f"/v1/tokens/{made['id']}", json={"reason": "x"}), 422)
        assert next(t for t in a.get("/v1/tokens").json()
                    if t["id"] == made["id"])["revokedAt"] is None
    with httpx.Client(base_url=bench.url, timeout=30,
                      headers={"Authorization": f"Bearer {made['token']}"}) as k:
        assert k.get("/v1/runs").status_code == 200


def test_an_empty_idempotency_key_is_refused_not_shared(bench: Bench) -> None:
    """``Idempotency-Key: $KEY`` with the variable unset sends an empty key: every write
    sent so was one key, and the second of two identical writes came back as the first,
    never held. An empty key is a 422; nothing is held."""
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "script", "goal": "empty keys"}).json()["id"]
        for _ in range(2):
            r = h.post(f"/v1/runs/{run}/scpi", headers={"Idempotency-Key": ""},
                       json={"instrument": "psu", "command": "VOLT 1.5,(@1)"})
            body = refused(r, 422)
            assert "idempotency-key" in body["reason"].lower(), body
        assert requests_of(h, run) == []
        # A real key still deduplicates, as before.
        first = h.post(f"/v1/runs/{run}/scpi", headers={"Idempotency-Key": "k1"},
                       json={"instrument": "psu", "command": "VOLT 1.5,(@1)"})
        again = h.post(f"/v1/runs/{run}/scpi", headers={"Idempotency-Key": "k1"},
                       json={"instrument": "psu", "command": "VOLT 1.5,(@1)"})
        assert first.status_code == again.status_code == 202, (first.text, again.text)
        assert first.json()["takeover"]["id"] == again.json()["takeover"]["id"]
        assert len(requests_of(h, run)) == 1


@pytest.mark.parametrize("media", ["application/x-www-form-urlencoded", "text/plain"])
def test_json_sent_as_a_form_is_a_415_that_says_so(bench: Bench, run: str, media: str) -> None:
    """``curl -d '{…}'`` without ``-H 'content-type: application/json'`` (as docs/takeover.md
    and docs/plans.md once showed) sends a form: it was a 422 "body: Input should be a valid
    dictionary or object to extract fields from", which names neither cause nor cure."""
    with bench.http("bot") as h:
        before = requests_of(h, run)
        for path, body in (("/v1/runs", {"kind": "agent", "goal": "IV sweep",
                                         "heartbeatSeconds": 60}),
                           (f"/v1/runs/{run}/plans", PLAN),
                           (f"/v1/runs/{run}/scpi", {"instrument": "psu",
                                                     "command": "VOLT 1,(@1)"})):
            r = h.post(path, content=json.dumps(body), headers={"Content-Type": media})
            problem = refused(r, 415)
            assert problem["reason"] == ("the request body must be JSON, sent as Content-Type: "
                                         f"application/json; this one was sent as {media}")
        assert requests_of(h, run) == before
        # JSON that is no object, sent as JSON, is still the 422 that names the body
        assert refused(h.post("/v1/runs", json=[1]), 422)["errors"][0]["loc"] == ["body"]
