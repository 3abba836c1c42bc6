"""A verified token is trusted 2 s without a store lookup (docs/performance.md), so a token
revoked on the store by another process (``bench-gate token revoke``) still passes the
HTTP door for that moment. A grant looked the token up again; clearing an emergency stop
and releasing a suspended run did not, so a just-revoked operator token could let writes
reach the instrument again. Every decision that lets a write go now looks it up, and so
does every other decision a person makes (a denial, a takeover, an answer)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from bench_gate.auth import Tokens
from bench_gate.store import open_store

from .._http_bench import Bench, start_bench


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("revoked-window"))


def operator(bench: Bench, name: str) -> httpx.Client:
    """A fresh operator token, verified once over HTTP (the door now trusts it 2 s)."""
    with bench.http("ada") as h:
        r = h.post("/v1/tokens", json={"name": name, "role": "operator"})
        assert r.status_code == 201, r.text
        bench.tokens[name] = str(r.json()["token"])
    with bench.http(name) as h:
        assert h.get("/v1/bench/stop").status_code == 200
    return bench.http(name)


def revoke_on_the_store(bench: Bench, name: str) -> None:
    """As ``bench-gate token revoke`` does: on the store file, the serving gateway not told
    (done in-process only to stay inside the 2 s a verified token is trusted)."""
    store = open_store(bench.db)
    try:
        assert Tokens(store).revoke(name) == 1
    finally:
        store.close()


def test_a_just_revoked_operator_token_never_clears_an_emergency_stop(bench: Bench) -> None:
    with bench.http("olga") as olga:
        assert olga.post("/v1/bench/stop", json={"instrument": "psu"}).status_code == 200
    try:
        with operator(bench, "mallory-stop") as mallory:
            revoke_on_the_store(bench, "mallory-stop")
            r = mallory.post("/v1/bench/stop/clear", json={"instrument": "psu"})
            assert r.status_code == 403, r.text
            assert "revoked" in r.text
        with bench.http("bot") as bot:
            assert "psu" in bot.get("/v1/bench/stop").json()["stopped"]
            run = bot.post("/v1/runs", json={"kind": "script"}).json()["id"]
            held = bot.post(f"/v1/runs/{run}/scpi",
                            json={"instrument": "psu", "command": "VOLT 1.25,(@1)"})
            assert held.status_code >= 400, held.text  # still stopped: every write refused
        assert bench.psu("VOLT? (@1)") != "1.25" and float(bench.psu("VOLT? (@1)")) != 1.25
    finally:
        with bench.http("olga") as olga:
            olga.post("/v1/bench/stop/clear", json={"instrument": "psu"})


def test_a_just_revoked_operator_token_never_releases_a_suspended_run(bench: Bench) -> None:
    with bench.http("bot") as bot:
        run = bot.post("/v1/runs", json={"kind": "script"}).json()["id"]
    with bench.http("olga") as olga:
        r = olga.post(f"/v1/runs/{run}/takeover/request", json={"reason": "looks wrong"})
        assert r.status_code == 200, r.text
    with operator(bench, "mallory-release") as mallory:
        revoke_on_the_store(bench, "mallory-release")
        r = mallory.post(f"/v1/runs/{run}/release")
        assert r.status_code == 403, r.text
    with bench.http("olga") as olga:
        assert olga.get(f"/v1/runs/{run}").json()["status"] != "active"


def test_a_just_revoked_admin_token_never_makes_another(bench: Bench) -> None:
    """A leaked admin token revoked on the store could still mint a fresh token, which
    would then approve anything, for as long as the door trusted it without a lookup."""
    with bench.http("ada") as h:
        r = h.post("/v1/tokens", json={"name": "mallory-admin", "role": "admin"})
        assert r.status_code == 201, r.text
        bench.tokens["mallory-admin"] = str(r.json()["token"])
    with bench.http("mallory-admin") as mallory:
        assert mallory.get("/v1/tokens").status_code == 200  # verified: trusted 2 s now
        revoke_on_the_store(bench, "mallory-admin")
        r = mallory.post("/v1/tokens", json={"name": "mallory-2", "role": "operator"})
        assert r.status_code == 403, r.text
    with bench.http("ada") as h:
        assert not [t for t in h.get("/v1/tokens").json() if t["name"] == "mallory-2"]


def test_a_just_revoked_operator_token_decides_nothing_at_all(bench: Bench) -> None:
    """Denying, taking a run over and answering an agent's question are decisions too: a
    denial suspends a run (three in a row), a takeover holds its writes, an answer steers
    an agent. None is made with a token revoked a moment ago on the store."""
    with bench.http("bot") as bot:
        run = bot.post("/v1/runs", json={"kind": "agent", "goal": "ramp"}).json()["id"]
        held = bot.post(f"/v1/runs/{run}/scpi",
                        json={"instrument": "psu", "command": "VOLT 1.75,(@1)"})
        assert held.status_code == 202, held.text
        tk = held.json()["takeover"]
        asked = bot.post(f"/v1/runs/{run}/questions", json={"questions": [
            {"text": "Which channel?", "options": [{"label": "CH1"}, {"label": "CH2"}]}]})
        assert asked.status_code == 201, asked.text
    decisions = {
        "deny": (f"/v1/runs/{run}/takeover/{tk['id']}/deny",
                 {"notes": "no", "proposalHash": tk["proposalHash"]}),
        "take-over": (f"/v1/runs/{run}/takeover/request", {"reason": "mine now"}),
        "answer": (f"/v1/questions/{asked.json()['id']}/answer",
                   {"answers": [{"choice": "CH2"}]}),
    }
    for what, (path, body) in decisions.items():
        with operator(bench, f"mallory-{what}") as mallory:
            revoke_on_the_store(bench, f"mallory-{what}")
            r = mallory.post(path, json=body)
        assert r.status_code == 403, f"{what}: {r.text}"
        assert "revoked" in r.text, r.text
    with bench.http("olga") as olga:
        assert olga.get(f"/v1/takeover/{tk['id']}").json()["status"] == "pending"
        assert olga.get(f"/v1/runs/{run}").json()["status"] == "active"
        assert olga.get(f"/v1/questions/{asked.json()['id']}").json()["status"] == "open"
        olga.post(f"/v1/runs/{run}/close")
