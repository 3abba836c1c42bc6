"""The smaller holes a hostile review found, each tested through the door where it was
found (a real server on the simulated bench), with the core's own check beside it:

1. an Idempotency-Key sent again with another body is a 422, never the earlier result;
2. only an operator may start an engineer run;
3. a token-shaped string in any free-text field is refused and never journaled;
4. a stated confidence outside 0..1 (0..100 %), NaN or inf is refused;
5. question options that differ only in case are a 422, and odd bodies on the question,
   answer and feedback endpoints never make a 500.
"""

from __future__ import annotations

import json
import math
import re
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench_gate.client import ApiError, Client
from bench_gate.confidence import stated_confidence, verbalized
from bench_gate.errors import IdempotencyKeyReused, InvalidInput, PermissionDenied
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, RunKind
from bench_gate.proxy import parse_gate
from bench_gate.scpi import ScpiError

from .._http_bench import Bench, start_bench

#: Shaped like a bench-gate token (``auth.RE_TOKEN``), never issued.
TOKEN = "bg_" + "Q7x" * 11
PROBLEMS = "https://bench-gate.dev/problems/"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("holes"))


def new_run(bench: Bench, who: str = "bot", kind: str = "agent") -> str:
    with bench.http(who) as h:
        r = h.post("/v1/runs", json={"kind": kind, "goal": "review holes"})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])


def post(bench: Bench, who: str, path: str, body: Any, **kw: Any) -> httpx.Response:
    with bench.http(who) as h:
        return h.post(path, json=body, **kw)


def journal_text(bench: Bench, run_id: str) -> str:
    with bench.http("olga") as h:
        r = h.get(f"/v1/runs/{run_id}/journal", params={"limit": 1000})
        assert r.status_code == 200, r.text
        return r.text


def store_bytes(bench: Bench) -> bytes:
    return bench.db.read_bytes() + b"".join(
        p.read_bytes() for p in bench.db.parent.glob(bench.db.name + "-*"))


def no_server_error(r: httpx.Response) -> None:
    assert r.status_code < 500, (r.status_code, r.text[:500])
    assert "Traceback" not in r.text and 'File "' not in r.text, r.text[:500]


# ------------------------------------------------------------------ 1. idempotency keys
def test_idempotency_key_reused_with_another_body_is_refused(bench: Bench) -> None:
    run = new_run(bench)
    path = f"/v1/runs/{run}/scpi"
    body = {"instrument": "psu", "command": "VOLT 1.25,(@1)", "rationale": "bias the DUT",
            "confidence": 0.7, "stepId": "s1", "timeoutMinutes": 20}
    key = {"Idempotency-Key": "step-1"}
    first = post(bench, "bot", path, body, headers=key)
    assert first.status_code == 202, first.text
    tk = first.json()["takeover"]
    again = post(bench, "bot", path, body, headers=key)
    assert again.status_code == 202 and again.json()["takeover"]["id"] == tk["id"]

    g = post(bench, "olga", f"/v1/runs/{run}/takeover/{tk['id']}/grant",
             {"approve": ["setpoint"], "proposalHash": tk["proposalHash"]})
    assert g.status_code == 200, g.text
    assert g.json()["request"]["status"] == "executed"
    # the exact retry still gets the first result
    same = post(bench, "bot", path, body, headers=key)
    assert same.status_code == 200 and same.json()["status"] == "executed"
    assert same.json()["takeover"]["id"] == tk["id"]

    variants: list[tuple[dict[str, Any], str]] = [
        ({"command": "VOLT 1.5,(@1)"}, "command"),
        ({"command": "VOLT 40,(@1)"}, "command"),  # outside the envelope
        ({"instrument": "dmm"}, "instrument"),
        ({"rationale": "another reason"}, "rationale"),
        ({"rationale": None}, "rationale"),
        ({"confidence": 0.9}, "confidence"),
        ({"stepId": "s2"}, "step id"),
        ({"timeoutMinutes": 21}, "timeout"),
    ]
    for change, named in variants:
        r = post(bench, "bot", path, {**body, **change}, headers=key)
        assert r.status_code == 422, (change, r.text)
        problem = r.json()
        assert problem["type"].endswith("idempotency_key_reused"), problem
        assert named in problem["reason"] and problem["requestId"] == tk["id"]
        assert named in problem["differs"]
    # a value outside what the body takes is still a plain validation error
    r = post(bench, "bot", path, {**body, "confidence": 2}, headers=key)
    assert r.status_code == 422 and r.json()["type"].endswith("invalid-input")
    # the instrument was written once, with the first command
    assert bench.psu("VOLT? (@1)").startswith("+1.25")


async def test_core_idempotency_default_timeout_is_the_same_request(
        gateway: Gateway, script: Principal) -> None:
    run = gateway.create_run(script, RunKind.SCRIPT)
    first = await gateway.submit(run.id, "psu", "VOLT 1,(@2)", idempotency_key="k")
    assert first.request is not None
    minutes = gateway.config.policy.default_timeout_minutes
    again = await gateway.submit(run.id, "psu", "VOLT 1,(@2)", idempotency_key="k",
                                 timeout_minutes=minutes)
    assert again.request is not None and again.request.id == first.request.id
    with pytest.raises(IdempotencyKeyReused) as caught:
        await gateway.submit(run.id, "psu", "VOLT 1,(@2)", idempotency_key="k",
                             step_id="other")
    assert caught.value.differences == ["step id"]
    assert isinstance(caught.value, InvalidInput)


# ------------------------------------------------------------------ 2. engineer runs
def test_a_requester_cannot_start_an_engineer_run(bench: Bench) -> None:
    r = post(bench, "bot", "/v1/runs", {"kind": "engineer", "goal": "mine"})
    assert r.status_code == 403, r.text
    assert "engineer runs are for operators" in r.json()["reason"]
    assert post(bench, "olga", "/v1/runs", {"kind": "engineer"}).status_code == 201
    assert post(bench, "ada", "/v1/runs", {"kind": "engineer"}).status_code == 201
    assert post(bench, "bot", "/v1/runs", {"kind": "script"}).status_code == 201


def test_console_panel_change_by_a_requester_is_refused(bench: Bench) -> None:
    with httpx.Client(base_url=bench.url, timeout=30, follow_redirects=False) as c:
        token = CSRF.search(c.get("/login").text)
        assert token
        r = c.post("/login", data={"csrf": token.group(1), "token": bench.tokens["bot2"],
                                   "next": "/"})
        assert r.status_code == 303, r.text
        found = CSRF.search(c.get("/").text)
        assert found
        r = c.post("/instruments/psu/change", data={"csrf": found.group(1), "channel": "1",
                                                    "voltage": "1"})
        assert r.status_code == 303, r.text  # back to the panel, with the reason
        page = c.get(r.headers["location"]).text
        assert "engineer runs are for operators" in page
    with bench.http("olga") as h:
        runs = h.get("/v1/runs", params={"limit": 1000}).json()
    assert not [r for r in runs if r["principal"] == "bot2" and r["kind"] == "engineer"]


async def test_core_engineer_runs_need_an_operator(gateway: Gateway, script: Principal,
                                                   olga: Principal) -> None:
    with pytest.raises(PermissionDenied, match="engineer runs are for operators"):
        gateway.create_run(script, "engineer")
    assert gateway.create_run(olga, RunKind.ENGINEER).kind is RunKind.ENGINEER


# ------------------------------------------------------------------ 3. tokens in free text
def test_token_in_every_free_text_field_is_refused_and_never_journaled(bench: Bench) -> None:
    run = new_run(bench)
    held = post(bench, "bot", f"/v1/runs/{run}/scpi",
                {"instrument": "psu", "command": "VOLT 0.5,(@3)", "rationale": "ok"})
    assert held.status_code == 202, held.text
    tk = held.json()["takeover"]
    ask = post(bench, "bot", f"/v1/runs/{run}/questions", {"questions": [
        {"text": "Which?", "options": [{"label": "a"}, {"label": "b"}],
         "allowFreeText": True}]})
    assert ask.status_code == 201, ask.text
    qid = ask.json()["id"]
    options = [{"label": "a"}, {"label": "b"}]
    cases: list[tuple[str, str, dict[str, Any], str]] = [
        ("bot", "/v1/runs", {"kind": "script", "goal": f"run {TOKEN}"}, "goal"),
        ("bot", f"/v1/runs/{run}/scpi", {"instrument": "psu", "command": "VOLT 1,(@3)",
                                         "rationale": f"because {TOKEN}"}, "rationale"),
        ("bot", f"/v1/runs/{run}/scpi", {"instrument": "psu", "command": "VOLT 1,(@3)",
                                         "stepId": TOKEN}, "stepId"),
        ("olga", f"/v1/runs/{run}/takeover/{tk['id']}/grant",
         {"approve": ["setpoint"], "notes": f"fine {TOKEN}",
          "proposalHash": tk["proposalHash"]}, "notes"),
        ("olga", f"/v1/runs/{run}/takeover/{tk['id']}/deny",
         {"notes": f"no {TOKEN}", "proposalHash": tk["proposalHash"]}, "notes"),
        ("bot", f"/v1/runs/{run}/questions",
         {"questions": [{"text": f"use {TOKEN}?", "options": options}]}, "text"),
        ("bot", f"/v1/runs/{run}/questions", {"questions": [
            {"text": "which?", "options": [{"label": TOKEN}, {"label": "b"}]}]}, "label"),
        ("bot", f"/v1/runs/{run}/questions", {"questions": [
            {"text": "which?", "options": [{"label": "a", "description": TOKEN},
                                           {"label": "b"}]}]}, "description"),
        ("olga", f"/v1/questions/{qid}/answer", {"answers": [{"text": TOKEN}]}, "text"),
        ("olga", f"/v1/questions/{qid}/answer", {"answers": [{"choice": TOKEN}]}, "choice"),
        ("olga", f"/v1/questions/{qid}/answer",
         {"answers": [{"choice": "a"}], "notes": TOKEN}, "notes"),
        ("bot", f"/v1/runs/{run}/feedback", {"stepId": "s1", "score": 4,
                                             "notes": f"good {TOKEN}"}, "notes"),
        ("bot", f"/v1/runs/{run}/feedback", {"stepId": TOKEN, "score": 4}, "stepId"),
        ("bot", f"/v1/runs/{run}/plans", {"instrument": "psu", "channels": [1],
                                          "voltage": [0, 1], "currentMax": 0.1,
                                          "maxWrites": 2, "rationale": TOKEN}, "rationale"),
        ("olga", f"/v1/runs/{run}/takeover/request", {"reason": f"mine {TOKEN}"}, "reason"),
        ("olga", f"/v1/runs/{run}/takeover/request", {"reason": "x", "stepId": TOKEN},
         "stepId"),
    ]
    for who, path, body, field in cases:
        r = post(bench, who, path, body)
        assert r.status_code in (400, 422), (path, body, r.status_code, r.text)
        assert field in r.json()["reason"], (path, r.json()["reason"])
        assert "token" in r.json()["reason"]
        assert TOKEN not in r.text, (path, r.text)
    # nothing of it was kept: the request, the question and the run are as they were
    with bench.http("olga") as h:
        assert h.get(f"/v1/takeover/{tk['id']}").json()["status"] == "pending"
        assert h.get(f"/v1/questions/{qid}").json()["status"] == "open"
        assert h.get(f"/v1/runs/{run}").json()["status"] == "active"
    assert TOKEN not in journal_text(bench, run)
    assert TOKEN.encode() not in store_bytes(bench)


def test_token_in_the_socket_doors_goal_and_rationale_is_refused(bench: Bench) -> None:
    assert bench.server.running is not None
    addr = bench.server.running.doors["psu"]
    out = converse(addr, f'GATE:GOAL "ramp {TOKEN}"', "SYST:ERR?",
                   f'GATE:RAT "why {TOKEN}"', "SYST:ERR?", "GATE:GOAL?", "GATE:RAT?",
                   'GATE:GOAL "a fine goal"', "GATE:RUN?", answers=5)
    assert out[0].startswith("-224,") and "GATE:GOAL" in out[0] and "token" in out[0]
    assert out[1].startswith("-224,") and "GATE:RAT" in out[1]
    assert out[2:4] == ['""', '""']
    run_id = out[4].strip('"')
    with bench.http("olga") as h:
        assert h.get(f"/v1/runs/{run_id}").json()["goal"] == "a fine goal"
    assert TOKEN not in "".join(out)
    assert TOKEN.encode() not in store_bytes(bench)


def converse(addr: tuple[str, int], *messages: str, answers: int) -> list[str]:
    with socket.create_connection(addr, timeout=10) as s:
        s.sendall("".join(m + "\n" for m in messages).encode())
        buf = b""
        while buf.count(b"\n") < answers:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return buf.decode().splitlines()


async def test_core_refuses_tokens_in_goal_feedback_questions_answers(
        gateway: Gateway, script: Principal, olga: Principal) -> None:
    with pytest.raises(InvalidInput, match="goal") as caught:
        gateway.create_run(script, RunKind.SCRIPT, goal=TOKEN)
    assert TOKEN not in caught.value.message
    run = gateway.create_run(script, RunKind.AGENT, goal="fine")
    with pytest.raises(InvalidInput, match="goal"):
        gateway.set_goal(run.id, f"now {TOKEN}")
    with pytest.raises(InvalidInput, match="notes"):
        gateway.feedback(run.id, "s1", 3, notes=TOKEN)
    with pytest.raises(InvalidInput, match="option 2 label"):
        gateway.questions.ask(run.id, script, [{"text": "q", "options": [
            {"label": "a"}, {"label": TOKEN}]}])
    ask = gateway.questions.ask(run.id, script, [{"text": "q", "options": [
        {"label": "a"}, {"label": "b"}], "allow_free_text": True}])
    with pytest.raises(InvalidInput, match="answer 1's text"):
        gateway.questions.answer(ask.id, olga, [{"text": TOKEN}])
    events = gateway.store.journal(run.id, limit=1000)
    assert TOKEN not in json.dumps([e.model_dump(mode="json") for e in events])
    assert gateway.get_run(run.id).goal == "fine"


# ------------------------------------------------------------------ 4. stated confidence
@pytest.mark.parametrize("rationale", [
    "Confidence: 9500%", "confidence 85", "Confidence: 101%", "confidence -0.1",
    "confidence: NaN", "Confidence: inf", "confidence 1,000%", "confidence 1e9",
    "Confidence: 0.5, later confidence 2"])
def test_stated_confidence_out_of_range_is_refused_over_http(bench: Bench,
                                                             rationale: str) -> None:
    run = new_run(bench)
    r = post(bench, "bot", f"/v1/runs/{run}/scpi",
             {"instrument": "psu", "command": "VOLT 1,(@2)", "rationale": rationale})
    assert r.status_code == 422, r.text
    assert "rationale" in r.json()["reason"] and "confidence" in r.json()["reason"]
    with bench.http("bot") as h:
        assert h.get(f"/v1/runs/{run}/takeover").json() == []


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400", "9500", "95%",
                                   "-0.01", "1.0000001", "true", '"0.5"'])
def test_confidence_field_out_of_range_is_refused_over_http(bench: Bench, value: str) -> None:
    run = new_run(bench)
    raw = '{"instrument": "psu", "command": "VOLT 1,(@2)", "confidence": ' + value + "}"
    with bench.http("bot") as h:
        r = h.post(f"/v1/runs/{run}/scpi", content=raw.encode(),
                   headers={"Content-Type": "application/json"})
    assert r.status_code in (400, 422), r.text
    assert "confidence" in r.json()["reason"] or r.status_code == 400


def test_client_confidence_out_of_range(bench: Bench) -> None:
    bot = Client(bench.url, bench.tokens["bot"])
    bot.run(kind="agent", goal="client confidence")
    for bad in (95.0, math.nan, math.inf, -0.5):
        with pytest.raises(ValueError, match="confidence"):  # refused before sending
            bot.write("psu", "VOLT 1,(@2)", confidence=bad, rationale="x")
    for bad in (95.0, -0.5):  # and the server refuses what another client sends
        with pytest.raises(ApiError) as caught:
            bot.submit("psu", "VOLT 1,(@2)", confidence=bad)
        assert caught.value.status == 422 and "confidence" in caught.value.reason
    with pytest.raises(ApiError) as caught:
        bot.write("psu", "VOLT 1,(@2)", rationale="Confidence: 9500%")
    assert caught.value.status == 422 and "confidence" in caught.value.reason
    with bench.http("bot") as h:
        assert h.get(f"/v1/runs/{bot.run_id}/takeover").json() == []
    bot.close()


def test_socket_door_confidence_out_of_range(bench: Bench) -> None:
    assert bench.server.running is not None
    addr = bench.server.running.doors["psu"]
    out = converse(addr, "GATE:CONF 95", "SYST:ERR?", 'GATE:RAT "Confidence: 9500%"',
                   "SYST:ERR?", "GATE:RAT?", answers=3)
    assert out[0].startswith("-222,")
    assert out[1].startswith("-224,") and "confidence" in out[1]
    assert out[2] == '""'


async def test_core_confidence_out_of_range_is_refused(gateway: Gateway,
                                                       script: Principal) -> None:
    run = gateway.create_run(script, RunKind.AGENT)
    for bad in (math.nan, math.inf, -math.inf, 95.0, -0.01):
        with pytest.raises(InvalidInput, match="confidence"):
            await gateway.submit(run.id, "psu", "VOLT 1,(@2)", confidence=bad)


_NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.integers(-10**6, 10**6).map(str),
    st.decimals(allow_nan=True, allow_infinity=True).map(str),
    st.text(alphabet="0123456789.,_-+eE%naifNIF ", max_size=12),
    st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "9500%", "1e9", ".5", "5.",
                     "0.5.5", "1_0", "١", "０.５"]))


@settings(max_examples=400, deadline=None, database=None)
@given(number=_NUMBERS, percent=st.sampled_from(["", "%", " %"]),
       lead=st.sampled_from(["Confidence: ", "confidence ", "CONFIDENCE=", "confidence:"]))
def test_stated_confidence_is_in_range_or_refused(number: str, percent: str,
                                                  lead: str) -> None:
    text = f"{lead}{number}{percent} because of the schematic"
    try:
        value = stated_confidence(text)
    except InvalidInput as exc:
        assert exc.field == "rationale" and "confidence" in exc.message
        # never a score from it: the gate counts it as silence
        assert verbalized(None, text, 0.0).value == 0.0
        return
    if value is not None:
        assert math.isfinite(value) and 0.0 <= value <= 1.0
        assert verbalized(None, text, 0.0).value == value


@settings(max_examples=300, deadline=None, database=None)
@given(value=st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                       st.integers(-1000, 1000).map(float)))
def test_stated_confidence_field_scores_only_in_range(value: float) -> None:
    scored = verbalized(value, None, 0.0)
    if math.isfinite(value) and 0 <= value <= 1:
        assert scored.value == value
    else:
        assert scored.value == 0.0 and "ignored" in scored.note


@settings(max_examples=300, deadline=None, database=None)
@given(number=_NUMBERS)
def test_socket_door_gate_conf_is_in_range_or_an_error(number: str) -> None:
    try:
        cmds = parse_gate(f"GATE:CONF {number}")
    except ScpiError as exc:
        assert exc.code in (-222, -224) or -199 <= exc.code <= -100, exc
        return
    value = cmds[0].number
    assert value is not None and math.isfinite(value) and 0 <= value <= 1


# ------------------------------------------------------------------ 5. questions
def test_options_differing_only_in_case_are_a_422(bench: Bench) -> None:
    run = new_run(bench)
    for labels in (["a", "A"], ["Yes", " yes "], ["ß", "SS"]):
        r = post(bench, "bot", f"/v1/runs/{run}/questions", {"questions": [
            {"text": "which?", "options": [{"label": x} for x in labels]}]})
        assert r.status_code == 422, (labels, r.text)
        assert "distinct" in r.json()["reason"]
        no_server_error(r)
    with bench.http("bot") as h:
        assert h.get("/v1/questions", params={"runId": run}).json() == []


def _odd_text() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.text(max_size=30),
        st.sampled_from(["", " ", "a", "A", "\x00", "\u202e", "💥", "ß", "SS", "\ud800",
                         "x" * 5000, "bg_" + "z" * 20, "Confidence: 9500%"]),
        st.integers(), st.floats(allow_nan=True), st.booleans(), st.none(),
        st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                             st.integers(), max_size=2))


def _option() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.fixed_dictionaries({"label": _odd_text()},
                              optional={"description": _odd_text()}),
        _odd_text())


def _question() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.fixed_dictionaries({"text": _odd_text(),
                               "options": st.one_of(st.lists(_option(), max_size=6),
                                                    _odd_text())},
                              optional={"allowFreeText": st.one_of(st.booleans(),
                                                                   _odd_text())}),
        _odd_text())


def _ask_body() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.fixed_dictionaries({"questions": st.one_of(st.lists(_question(), max_size=5),
                                                       _odd_text())},
                              optional={"timeoutMinutes": _odd_text()}),
        _odd_text())


def _answer_body() -> st.SearchStrategy[Any]:
    answer = st.one_of(st.fixed_dictionaries({}, optional={"choice": _odd_text(),
                                                           "text": _odd_text()}),
                       _odd_text())
    return st.one_of(
        st.fixed_dictionaries({"answers": st.one_of(st.lists(answer, max_size=5),
                                                     _odd_text())},
                              optional={"notes": _odd_text()}),
        _odd_text())


def _feedback_body() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.fixed_dictionaries({"stepId": _odd_text(), "score": _odd_text()},
                              optional={"notes": _odd_text()}),
        _odd_text())


def _send(h: httpx.Client, path: str, body: Any) -> httpx.Response:
    # ensure_ascii: a lone surrogate goes on the wire as its JSON escape, as a client may
    raw = json.dumps(body, allow_nan=True).encode()
    return h.post(path, content=raw, headers={"Content-Type": "application/json"})


ODD = settings(max_examples=60, deadline=None, database=None,
               suppress_health_check=list(HealthCheck))


def odd_bodies_never_make_a_500(bench: Bench, path: str, bodies: st.SearchStrategy[Any]
                                ) -> None:
    """The requester posts ``ODD`` many generated ``bodies`` to ``path``: never a 500."""
    with bench.http("bot") as h:

        @ODD
        @given(body=bodies)
        def send(body: Any) -> None:
            no_server_error(_send(h, path, body))

        send()


def raw_body_never_makes_a_500(bench: Bench, path: str, raw: bytes) -> httpx.Response:
    """The requester posts ``raw`` bytes as JSON to ``path``: never a 500."""
    with bench.http("bot") as h:
        r = h.post(path, content=raw, headers={"Content-Type": "application/json"})
    no_server_error(r)
    return r


def test_odd_question_bodies_never_make_a_500(bench: Bench) -> None:
    odd_bodies_never_make_a_500(bench, f"/v1/runs/{new_run(bench)}/questions", _ask_body())


def test_odd_answer_bodies_never_make_a_500(bench: Bench) -> None:
    run = new_run(bench)
    asks: list[str] = []

    def open_ask() -> str:
        r = post(bench, "bot", f"/v1/runs/{run}/questions", {"questions": [
            {"text": "one?", "options": [{"label": "a"}, {"label": "B"}],
             "allowFreeText": True},
            {"text": "two?", "options": [{"label": "x"}, {"label": "y"}]}]})
        assert r.status_code == 201, r.text
        asks.append(r.json()["id"])
        return asks[-1]

    open_ask()
    with bench.http("olga") as h:

        @ODD
        @given(body=_answer_body())
        def answer(body: Any) -> None:
            r = _send(h, f"/v1/questions/{asks[-1]}/answer", body)
            no_server_error(r)
            if r.status_code == 200:
                open_ask()

        answer()


def test_odd_feedback_bodies_never_make_a_500(bench: Bench) -> None:
    odd_bodies_never_make_a_500(bench, f"/v1/runs/{new_run(bench)}/feedback",
                                _feedback_body())


@pytest.mark.parametrize("raw", [
    b'{"questions": [{"text": "\\ud800", "options": [{"label": "a"}, {"label": "b"}]}]}',
    b'{"questions": [{"text": "q", "options": [{"label": "\\udfff"}, {"label": "b"}]}]}',
    b'{"questions": [{"text": "q", "options": [{"label": "a"}, {"label": "a "}]}]}',
    b'{"questions": [{"text": "q", "options": []}]}',
    b'{"questions": []}', b'[]', b'null', b'"x"', b'{', b'',
    b'{"questions": [{"text": "q", "options": [{"label": "a"}, {"label": "b"}]}], '
    b'"timeoutMinutes": 1e400}',
])
def test_raw_question_bodies_never_make_a_500(bench: Bench, raw: bytes) -> None:
    r = raw_body_never_makes_a_500(bench, f"/v1/runs/{new_run(bench)}/questions", raw)
    assert r.status_code in (400, 422), r.text


@pytest.mark.parametrize("raw", [
    b'{"stepId": "\\ud800", "score": 3}', b'{"stepId": "s", "score": 3, "notes": "\\udc00"}',
    b'{"stepId": "s", "score": 3.5}', b'{"stepId": "s", "score": "3"}',
])
def test_raw_feedback_bodies_never_make_a_500(bench: Bench, raw: bytes) -> None:
    raw_body_never_makes_a_500(bench, f"/v1/runs/{new_run(bench)}/feedback", raw)


async def test_core_options_differing_only_in_case(gateway: Gateway,
                                                  script: Principal) -> None:
    run = gateway.create_run(script, RunKind.AGENT)
    with pytest.raises(InvalidInput, match="distinct"):
        gateway.questions.ask(run.id, script, [{"text": "q", "options": [
            {"label": "a"}, {"label": " A"}]}])


# ------------------------------------------------------------------ the MCP door
async def test_mcp_refuses_tokens_and_bad_confidence(bench: Bench) -> None:
    from ..doors.mcp.test_mcp import call, data, http_session, text

    async with http_session(bench) as client:
        r = await call(client, "set_goal", goal=f"use {TOKEN}")
        assert r.is_error and data(r)["error"] == "invalid_input", text(r)
        assert "goal" in text(r) and TOKEN not in text(r)
        await call(client, "set_goal", goal="mcp holes")
        for args in ({"rationale": "Confidence: 9500%"}, {"rationale": f"see {TOKEN}"},
                     {"rationale": "x", "confidence": True},
                     {"rationale": "x", "step_id": f"s-{TOKEN}"},
                     {"rationale": "x", "confidence": 95}):
            r = await call(client, "scpi_write", instrument="psu", command="VOLT 1,(@2)",
                           **args)
            assert r.is_error, (args, text(r))
            assert TOKEN not in text(r)
        r = await call(client, "request_plan", instrument="psu", channels=[1],
                       voltage_min=0, voltage_max=1, current_max=0.1, max_writes=2,
                       rationale=f"plan {TOKEN}")
        assert r.is_error and TOKEN not in text(r), text(r)
        r = await call(client, "ask_operator", wait_s=0, questions=[
            {"text": "which?", "options": [{"label": "a"}, {"label": "A"}]}])
        assert r.is_error and "distinct" in text(r), text(r)
    with bench.http("olga") as h:
        pending = h.get("/v1/takeover", params={"status": "pending", "limit": 1000}).json()
    assert not [tk for tk in pending if TOKEN in json.dumps(tk)]
    assert TOKEN.encode() not in store_bytes(bench)
