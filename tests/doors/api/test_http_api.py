"""The HTTP API against a real uvicorn server and the simulated bench."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench_gate.client import ApiError, Client

from ..._http_bench import Bench, shown_hash, start_bench, suspended_run


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("http"), two_person_output_enable=True)


def run_for(bench: Bench, who: str = "bot", kind: str = "script") -> str:
    with bench.http(who) as h:
        r = h.post("/v1/runs", json={"kind": kind, "goal": "test"})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])


def submit(bench: Bench, run_id: str, command: str, who: str = "bot", **kw: Any
           ) -> httpx.Response:
    with bench.http(who) as h:
        return h.post(f"/v1/runs/{run_id}/scpi", json={"instrument": "psu",
                                                       "command": command}, **kw)


def grant(bench: Bench, who: str, run_id: str, tk: str, *kinds: str,
          proposal_hash: str | None = None) -> httpx.Response:
    """A grant naming ``proposal_hash``, or the proposal ``who`` reads just before."""
    with bench.http(who) as h:
        seen = proposal_hash or shown_hash(h, tk)
        return h.post(f"/v1/runs/{run_id}/takeover/{tk}/grant",
                      json={"approve": list(kinds), "proposalHash": seen})


def volts(text: str) -> Decimal:
    return Decimal(text)


def test_read_passes(bench: Bench) -> None:
    run = run_for(bench)
    r = submit(bench, run, "*IDN?")
    assert r.status_code == 200
    assert r.json()["status"] == "executed"
    assert "E36312A" in r.json()["response"]


def test_write_is_held_and_runs_only_after_grant(bench: Bench) -> None:
    run = run_for(bench)
    before = volts(bench.psu("VOLT? (@1)"))
    r = submit(bench, run, "VOLT 4.5,(@1)")
    assert r.status_code == 202
    tk = r.json()["takeover"]
    assert tk["status"] == "pending" and tk["approvalsMissing"] == ["setpoint"]
    assert tk["handoff"]["command"] == "VOLT 4.5,(@1)"
    assert volts(bench.psu("VOLT? (@1)")) == before  # nothing written yet
    with bench.http("olga") as h:
        one = h.get(f"/v1/takeover/{tk['id']}").json()
        assert one["handoff"]["reversibility"] and one["expiresAt"]
        assert one["approvalsGiven"] == []
    g = grant(bench, "olga", run, tk["id"], "setpoint", proposal_hash=one["proposalHash"])
    assert g.status_code == 200, g.text
    assert g.json()["request"]["status"] == "executed"
    assert g.json()["request"]["receipt"]["sent"] == ["VOLT 4.5,(@1)"]
    assert volts(bench.psu("VOLT? (@1)")) == Decimal("4.5")


@pytest.mark.parametrize(("channel", "first", "second"), [
    (2, "setpoint", "output_enable"), (3, "output_enable", "setpoint")])
def test_two_approvals_either_order(bench: Bench, channel: int, first: str,
                                    second: str) -> None:
    run = run_for(bench)
    r = submit(bench, run, f"VOLT 1.5,(@{channel});:CURR 0.4,(@{channel});:OUTP ON,(@{channel})")
    assert r.status_code == 202, r.text
    tk = r.json()["takeover"]["id"]
    assert sorted(r.json()["takeover"]["required"]) == ["output_enable", "setpoint"]
    # one person may not give both halves (two-person rule on this bench)
    both = grant(bench, "olga", run, tk, "setpoint", "output_enable")
    assert both.status_code == 403 and "two different people" in both.json()["reason"]
    g1 = grant(bench, "olga", run, tk, first)
    assert g1.status_code == 200
    assert g1.json()["request"]["status"] == "pending"
    assert g1.json()["missing"] == [second]
    assert g1.json()["message"]
    assert bench.psu(f"OUTP? (@{channel})") == "0"
    same = grant(bench, "olga", run, tk, second)
    assert same.status_code == 403 and "second person" in same.json()["reason"]
    g2 = grant(bench, "oscar", run, tk, second)
    assert g2.status_code == 200
    assert g2.json()["request"]["status"] == "executed", g2.json()
    assert bench.psu(f"OUTP? (@{channel})") == "1"


def test_deny_note_reaches_the_waiting_client(bench: Bench) -> None:
    result: dict[str, Any] = {}
    bot = Client(bench.url, bench.tokens["bot"])
    bot.run(kind="agent", goal="deny me")

    def write() -> None:
        result["outcome"] = bot.write("psu", "VOLT 5.5,(@1)", wait=20,
                                      rationale="needs more headroom")

    t = threading.Thread(target=write)
    t.start()
    olga = Client(bench.url, bench.tokens["olga"])
    for _ in range(100):
        mine = [tk for tk in olga.pending() if tk["runId"] == bot.run_id]
        if mine:
            break
        threading.Event().wait(0.05)
    olga.deny(mine[0]["id"], "too close to the DUT's 6 V rating",
              proposal_hash=olga.get(mine[0]["id"])["proposalHash"])
    t.join(25)
    outcome = result["outcome"]
    assert outcome.status == "denied"
    assert outcome.notes == "too close to the DUT's 6 V rating"
    bot.close()
    olga.close()


def test_expiry(bench: Bench) -> None:
    bot = Client(bench.url, bench.tokens["bot"])
    bot.run()
    outcome = bot.write("psu", "VOLT 0.5,(@1)")
    assert outcome.status == "pending"
    bench.clock.advance(minutes=31)
    final = bot.wait(str(outcome.request_id), 10)
    assert final.status == "expired"
    assert "nothing was written" in (final.message or "")
    g = grant(bench, "olga", str(bot.run_id), str(outcome.request_id), "setpoint")
    assert g.status_code == 409
    bot.close()


def test_idempotent_retry(bench: Bench) -> None:
    run = run_for(bench)
    key = {"Idempotency-Key": "step-7-attempt"}
    a = submit(bench, run, "VOLT 1,(@1)", headers=key)
    b = submit(bench, run, "VOLT 1,(@1)", headers=key)
    assert a.status_code == b.status_code == 202
    assert a.json()["takeover"]["id"] == b.json()["takeover"]["id"]
    with bench.http("bot") as h:
        assert len(h.get(f"/v1/runs/{run}/takeover").json()) == 1


def test_self_approval_refused_with_reason(bench: Bench) -> None:
    run = run_for(bench, who="olga", kind="agent")
    r = submit(bench, run, "VOLT 1,(@1)", who="olga")
    tk = r.json()["takeover"]["id"]
    g = grant(bench, "olga", run, tk, "setpoint")
    assert g.status_code == 403
    assert g.headers["content-type"].startswith("application/problem+json")
    assert "cannot approve" in g.json()["reason"]


def test_takeover_holds_writes_until_release(bench: Bench) -> None:
    run = run_for(bench)
    with bench.http("olga") as h:
        r = h.post(f"/v1/runs/{run}/takeover/request", json={"reason": "I drive now"})
        assert r.status_code == 200 and r.json()["status"] == "taken_over"
    assert submit(bench, run, "MEAS:VOLT? (@1)").status_code == 200
    held = submit(bench, run, "VOLT 1,(@1)")
    assert held.status_code == 202
    tk = held.json()["takeover"]["id"]
    other = run_for(bench)
    with bench.http("olga") as h:
        assert h.post(f"/v1/runs/{other}/takeover/{tk}/release").status_code == 404
        r = h.post(f"/v1/runs/{run}/takeover/{tk}/release")
        assert r.status_code == 200 and r.json()["status"] == "active"


def test_an_operator_cannot_release_their_own_suspended_run(bench: Bench) -> None:
    """Suspension asks another person to look: olga made the run, oscar suspended it; olga
    gets a 403 problem saying why, at both release routes and at takeover; oscar releases."""
    run, tk = suspended_run(bench, "olga", "oscar")
    with bench.http("olga") as h:
        for path in (f"/v1/runs/{run}/release", f"/v1/runs/{run}/takeover/{tk}/release"):
            r = h.post(path)
            assert r.status_code == 403, r.text
            assert r.headers["content-type"].startswith("application/problem+json")
            assert "other than its requester" in r.json()["reason"]
        r = h.post(f"/v1/runs/{run}/takeover/request", json={"reason": "mine"})
        assert r.status_code == 403 and "cannot take it over" in r.json()["reason"]
        assert h.get(f"/v1/runs/{run}").json()["status"] == "suspended"
    with bench.http("oscar") as h:
        r = h.post(f"/v1/runs/{run}/release")
        assert r.status_code == 200 and r.json()["status"] == "active"


def test_problems_never_500(bench: Bench) -> None:
    run = run_for(bench)
    with bench.http("bot") as h:
        bad = h.post(f"/v1/runs/{run}/scpi", content=b"{not json",
                     headers={"content-type": "application/json"})
        assert bad.status_code == 400
        assert bad.headers["content-type"].startswith("application/problem+json")
        assert bad.json()["reason"]
        scpi = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu", "command": "VOLT"})
        assert scpi.status_code == 422 and scpi.json()["scpiCode"] < 0
        env = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                   "command": "VOLT 11,(@2);CURR 0.9,(@2)"})
        assert env.status_code == 422 and env.json()["scpiCode"] == -222
        assert "limit" in env.json()["reason"]
        missing = h.get("/v1/runs/run-nope")
        assert missing.status_code == 404 and missing.json()["status"] == 404
        noinst = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "x", "command": "*IDN?"})
        assert noinst.status_code == 404
        wrong = h.post("/v1/runs", json={"kind": "robot"})
        assert wrong.status_code == 422


def test_long_poll_caps_and_returns_executed(bench: Bench) -> None:
    run = run_for(bench)
    r = submit(bench, run, "VOLT 2,(@1)")
    tk = r.json()["takeover"]["id"]
    result: dict[str, httpx.Response] = {}

    def poll() -> None:
        with bench.http("bot") as h:
            result["r"] = h.get(f"/v1/takeover/{tk}", params={"wait": 20})

    t = threading.Thread(target=poll)
    t.start()
    threading.Event().wait(0.3)
    grant(bench, "oscar", run, tk, "setpoint")
    t.join(25)
    assert result["r"].json()["status"] == "executed"


def test_instruments_events_health_metrics(bench: Bench) -> None:
    with bench.http("bot") as h:
        inst = {i["name"]: i for i in h.get("/v1/instruments").json()}
        assert inst["psu"]["profile"] == "e36312a"
        assert inst["psu"]["resource"].startswith("TCPIP0::127.0.0.1::")
        assert inst["psu"]["doorPort"]
        state = h.get("/v1/instruments/dmm/state").json()
        assert "34465A" in state["idn"]
        metrics = h.get("/metrics").text
        assert "bench_gate_pending_requests" in metrics
        assert 'bench_gate_io_errors_total{instrument="psu"} 0' in metrics
    assert httpx.get(bench.url + "/healthz").json() == {"status": "ok"}
    seen: list[str] = []
    ready = threading.Event()

    def listen() -> None:
        with bench.http("olga") as h, h.stream("GET", "/v1/events") as r:
            for line in r.iter_lines():
                ready.set()
                if line.startswith("data: ") and '"run"' in line:
                    seen.append(line)
                    return

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    assert ready.wait(10)
    run_for(bench)
    t.join(10)
    assert seen


def test_client_query_and_operator_calls(bench: Bench) -> None:
    with Client(bench.url, bench.tokens["bot"]) as bot:
        bot.run(goal="client")
        assert "34465A" in bot.query("dmm", "*IDN?")
        with pytest.raises(ApiError) as exc:
            bot.query("psu", "VOLT 99,(@1)")
        assert exc.value.status == 422 and exc.value.scpi_code == -222
        mine = {r["id"] for r in bot.runs()}
        assert all(tk["runId"] in mine for tk in bot.pending())  # its own, not a 403


# --------------------------------------------------------------------------- roles
NONE, REQ, OP, ADMIN = "none", "requester", "operator", "admin"
RANK = {REQ: 0, OP: 1, ADMIN: 2}


@pytest.fixture(scope="module")
def fixtures(bench: Bench) -> dict[str, str]:
    run = run_for(bench)
    r = submit(bench, run, "VOLT 0.1,(@3)")
    return {"run": run, "tk": r.json()["takeover"]["id"]}


ENDPOINTS: list[tuple[str, str, dict[str, Any] | None, str]] = [
    ("POST", "/v1/runs", {"kind": "script"}, REQ),
    ("GET", "/v1/runs", None, REQ),
    ("GET", "/v1/runs/{run}", None, REQ),
    ("GET", "/v1/runs/{run}/journal", None, REQ),
    ("GET", "/v1/runs/{run}/takeover", None, REQ),
    ("GET", "/v1/takeover/{tk}", None, REQ),
    ("GET", "/v1/takeover?status=pending", None, REQ),
    ("POST", "/v1/runs/{run}/takeover/{tk}/grant", {"approve": ["state"]}, OP),
    ("POST", "/v1/runs/{run}/takeover/{tk}/deny", {"notes": ""}, OP),
    ("POST", "/v1/runs/{run}/takeover/{tk}/release", None, OP),
    ("POST", "/v1/runs/{run}/takeover/request", {"reason": ""}, OP),
    ("POST", "/v1/runs/{run}/release", None, OP),
    ("POST", "/v1/runs/{run}/plans", {"instrument": ""}, REQ),
    ("GET", "/v1/runs/{run}/plans", None, REQ),
    ("GET", "/v1/runs/{run}/plans/plan-nope", None, REQ),
    ("POST", "/v1/runs/{run}/plans/plan-nope/revoke", None, OP),
    ("POST", "/v1/runs/{run}/feedback", {"stepId": ""}, REQ),
    ("GET", "/v1/instruments", None, REQ),
    ("GET", "/v1/instruments/psu/state", None, REQ),
    ("GET", "/metrics", None, REQ),
    ("GET", "/v1/tokens", None, ADMIN),
    ("POST", "/v1/tokens", {"name": "", "role": "requester"}, ADMIN),
    ("DELETE", "/v1/tokens/nobody", None, ADMIN),
    ("GET", "/v1/config", None, ADMIN),
]
WHO = {REQ: "bot", OP: "olga", ADMIN: "ada"}


@pytest.mark.parametrize("role", [NONE, REQ, OP, ADMIN])
@pytest.mark.parametrize(("method", "path", "body", "needs"), ENDPOINTS,
                         ids=[f"{m} {p}" for m, p, _, _ in ENDPOINTS])
def test_role_matrix(bench: Bench, fixtures: dict[str, str], role: str, method: str,
                     path: str, body: dict[str, Any] | None, needs: str) -> None:
    """Bodies are deliberately invalid where allowed, so nothing changes state."""
    url = path.format(**fixtures)
    with bench.http(WHO.get(role)) as h:
        r = h.request(method, url, json=body)
    assert r.status_code != 500
    if role == NONE:
        assert r.status_code == 401, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
    elif RANK[role] < RANK[needs]:
        assert r.status_code == 403, r.text
        article = "an" if role == OP else "a"  # was "olga is a operator"
        assert r.json()["reason"].startswith(f"{WHO[role]} is {article} {role}; "), r.text
    else:
        assert r.status_code not in (401, 403), (r.status_code, r.text)


def test_requester_sees_only_its_own_runs(bench: Bench, fixtures: dict[str, str]) -> None:
    with bench.http("bot2") as h:
        assert h.get(f"/v1/runs/{fixtures['run']}").status_code == 403
        assert h.get(f"/v1/takeover/{fixtures['tk']}").status_code == 403
        assert h.post(f"/v1/runs/{fixtures['run']}/scpi",
                      json={"instrument": "psu", "command": "*IDN?"}).status_code == 403
        assert all(r["principal"] == "bot2" for r in h.get("/v1/runs").json())


def test_revoked_token_is_401(bench: Bench, tmp_path: Path) -> None:
    with bench.http("ada") as h:
        made = h.post("/v1/tokens", json={"name": "temp", "role": "requester"}).json()
        with httpx.Client(base_url=bench.url,
                          headers={"Authorization": f"Bearer {made['token']}"}) as t:
            assert t.get("/v1/runs").status_code == 200
            assert h.delete(f"/v1/tokens/{made['id']}").json() == {"revoked": 1}
            assert t.get("/v1/runs").status_code == 401
