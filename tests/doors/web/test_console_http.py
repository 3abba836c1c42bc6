"""The console without a browser: sign-in, CSRF refusal, auth redirects and role checks,
against a real server (uvicorn in a thread, a temporary store, the simulated bench)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ..._http_bench import Bench, start_bench

CSRF = re.compile(r'name="csrf" value="([^"]+)"')
HASH = re.compile(r'name="shown_hash" value="([^"]+)"')
LIVE = re.compile(r'name="shown_live" value="([^"]*)"')


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("console"))


def browser(bench: Bench) -> httpx.Client:
    return httpx.Client(base_url=bench.url, timeout=30, follow_redirects=False)


def sign_in(bench: Bench, who: str) -> tuple[httpx.Client, str]:
    """A signed-in console client and its session's CSRF token."""
    c = browser(bench)
    page = c.get("/login")
    token = CSRF.search(page.text)
    assert token, page.text
    r = c.post("/login", data={"csrf": token.group(1), "token": bench.tokens[who],
                               "next": "/"})
    assert r.status_code == 303, r.text
    home = c.get("/")
    assert home.status_code == 200
    found = CSRF.search(home.text)
    assert found
    return c, found.group(1)


def held(bench: Bench, command: str, who: str = "bot") -> tuple[str, str]:
    with bench.http(who) as h:
        run = h.post("/v1/runs", json={"kind": "script", "goal": "console test"}).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu", "command": command})
        assert r.status_code == 202, r.text
        return str(run), str(r.json()["takeover"]["id"])


def status_of(bench: Bench, tk: str) -> str:
    with bench.http("olga") as h:
        return str(h.get(f"/v1/takeover/{tk}").json()["status"])


def test_pages_redirect_to_sign_in(bench: Bench) -> None:
    with browser(bench) as c:
        for path in ("/", "/history", "/instruments/psu", "/requests/tk-x", "/runs/run-x"):
            r = c.get(path)
            assert r.status_code == 303, path
            assert r.headers["location"].startswith("/login?next=")
        assert c.get("/fragments/queue").status_code == 401
        assert c.get("/events").status_code == 401


def test_api_routes_are_unchanged_and_the_console_is_not_in_openapi(bench: Bench) -> None:
    with browser(bench) as c:
        assert c.get("/healthz").json() == {"status": "ok"}
        assert c.get("/v1/runs").status_code == 401
        paths = c.get("/openapi.json").json()["paths"]
        assert not any(p.startswith(("/login", "/requests", "/history")) for p in paths)
        assert c.get("/static/console.js").status_code == 200


def test_sign_in_needs_the_login_csrf_and_a_valid_token(bench: Bench) -> None:
    with browser(bench) as c:
        c.get("/login")
        r = c.post("/login", data={"csrf": "forged", "token": bench.tokens["olga"]})
        assert r.status_code == 403
        assert "bg_session" not in r.cookies
    with browser(bench) as c:
        token = CSRF.search(c.get("/login").text)
        assert token
        r = c.post("/login", data={"csrf": token.group(1), "token": "bg_nope"})
        assert r.status_code == 401
        assert "not valid" in r.text


def test_session_cookie_is_httponly_and_sign_out_ends_it(bench: Bench) -> None:
    c = browser(bench)
    token = CSRF.search(c.get("/login").text)
    assert token
    r = c.post("/login", data={"csrf": token.group(1), "token": bench.tokens["olga"]})
    cookie = r.headers["set-cookie"]
    assert "bg_session=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    csrf = CSRF.search(c.get("/").text)
    assert csrf
    assert c.post("/logout", data={"csrf": "wrong"}).status_code == 403
    assert c.post("/logout", data={"csrf": csrf.group(1)}).status_code == 303
    assert c.get("/").status_code == 303
    c.close()


def test_decisions_refuse_a_missing_or_wrong_csrf_token(bench: Bench) -> None:
    _, tk = held(bench, "VOLT 1.25,(@1)")
    c, csrf = sign_in(bench, "olga")
    page = c.get(f"/requests/{tk}").text
    shown_hash, shown_live = HASH.search(page), LIVE.search(page)
    assert shown_hash and shown_live
    form = {"kind": "setpoint", "shown_hash": shown_hash.group(1),
            "shown_live": shown_live.group(1).replace("&#34;", '"')}
    assert c.post(f"/requests/{tk}/approve", data=form).status_code == 403
    assert c.post(f"/requests/{tk}/approve", data={**form, "csrf": "x" + csrf}).status_code == 403
    cross = c.post(f"/requests/{tk}/approve", data={**form, "csrf": csrf},
                   headers={"Origin": "http://evil.example"})
    assert cross.status_code == 403
    assert c.post(f"/requests/{tk}/deny", data={"notes": "no"}).status_code == 403
    assert status_of(bench, tk) == "pending"
    ok = c.post(f"/requests/{tk}/approve", data={**form, "csrf": csrf})
    assert ok.status_code == 303, ok.text
    assert status_of(bench, tk) == "executed"
    c.close()


def test_a_requester_sees_only_its_own_runs_and_cannot_decide(bench: Bench) -> None:
    _, mine = held(bench, "VOLT 1.5,(@2)", who="bot")
    _, theirs = held(bench, "VOLT 1.75,(@2)", who="bot2")
    c, csrf = sign_in(bench, "bot")
    queue = c.get("/").text
    assert mine in queue and theirs not in queue
    assert "you see your own runs only" in queue
    assert c.get(f"/requests/{theirs}").status_code == 403
    own = c.get(f"/requests/{mine}")
    assert own.status_code == 200 and 'id="approve-form"' not in own.text
    r = c.post(f"/requests/{mine}/approve", data={"csrf": csrf, "kind": "setpoint"})
    assert r.status_code == 403
    assert c.post(f"/requests/{mine}/deny", data={"csrf": csrf, "notes": "x"}).status_code == 403
    assert status_of(bench, mine) == "pending"
    c.close()


def test_deny_needs_a_note_and_edits_are_checked_against_the_envelope(bench: Bench) -> None:
    _, tk = held(bench, "VOLT 2,(@3)")
    c, csrf = sign_in(bench, "oscar")
    r = c.post(f"/requests/{tk}/deny", data={"csrf": csrf, "notes": "  "})
    assert r.status_code == 422 and "needs a note" in r.text
    page = c.get(f"/requests/{tk}").text
    shown_hash, shown_live = HASH.search(page), LIVE.search(page)
    assert shown_hash and shown_live
    r = c.post(f"/requests/{tk}/approve", data={
        "csrf": csrf, "kind": "setpoint", "shown_hash": shown_hash.group(1),
        "shown_live": shown_live.group(1).replace("&#34;", '"'), "edit:CH3.voltage": "13"})
    assert r.status_code == 422 and "outside" in r.text
    r = c.post(f"/requests/{tk}/approve", data={
        "csrf": csrf, "shown_hash": shown_hash.group(1),
        "shown_live": shown_live.group(1).replace("&#34;", '"')})
    assert r.status_code == 422 and "nothing is approved by default" in r.text
    assert status_of(bench, tk) == "pending"
    c.close()


def test_history_and_timeline_render(bench: Bench, tmp_path: Path) -> None:
    run, tk = held(bench, "VOLT 0.5,(@3)")
    c, csrf = sign_in(bench, "olga")
    shown = HASH.search(c.get(f"/requests/{tk}").text)
    assert shown
    assert c.post(f"/requests/{tk}/deny", data={"csrf": csrf, "notes": "not now",
                                                "shown_hash": shown.group(1)}
                  ).status_code == 303
    hist = c.get("/history", params={"outcome": "denied"}).text
    assert tk in hist
    assert tk not in c.get("/history", params={"outcome": "executed"}).text
    timeline = c.get(f"/runs/{run}").text
    assert "takeover requested" in timeline and "takeover denied" in timeline
    assert "“not now”" in timeline  # the note, beside the event that names the denial
    assert "console_denied" in timeline or "console denied" in timeline
    c.close()


def test_an_agents_question_waits_in_the_queue_and_gets_its_answer(bench: Bench) -> None:
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "agent", "goal": "pick a rail"}).json()["id"]
        asked = h.post(f"/v1/runs/{run}/questions", json={"questions": [{
            "text": "Which rail feeds the DUT?",
            "options": [{"label": "3V3"}, {"label": "5V"}], "allowFreeText": True}]})
        assert asked.status_code in (200, 201, 202), asked.text
        qid = asked.json()["id"]
    c, csrf = sign_in(bench, "olga")
    try:
        queue = c.get("/fragments/queue").text
        assert f"/questions/{qid}" in queue and "AGENT ASKS" in queue
        page = c.get(f"/questions/{qid}")
        assert "Which rail feeds the DUT?" in page.text and 'value="3V3"' in page.text
        forged = c.post(f"/questions/{qid}/answer", data={"csrf": "x", "choice-0": "3V3"})
        assert forged.status_code == 403
        r = c.post(f"/questions/{qid}/answer",
                   data={"csrf": csrf, "choice-0": "3V3", "text-0": "the left one"},
                   headers={"origin": bench.url})
        assert r.status_code == 303, r.text
        assert f"/questions/{qid}" not in c.get("/fragments/queue").text
    finally:
        c.close()
    with bench.http("bot") as h:
        done = h.get(f"/v1/questions/{qid}").json()
    assert done["status"] == "answered"
    assert done["answers"][0]["choice"] == "3V3"
    assert done["answeredBy"] == "olga"
