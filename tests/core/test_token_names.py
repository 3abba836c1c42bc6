"""Token names are normalized (issue 15): identities are compared case-folded and trimmed,
and a token name is unique in that form, so ``Olga`` and ``olga `` can never pass for two
people beside ``olga``. Over HTTP (``POST /v1/tokens``), with the CLI's ``token create``,
and through the two-person rule and the self-approval rule of a real server.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from bench_gate.auth import TOKEN_PREFIX, normalize_name

from .._http_bench import Bench, shown_hash, start_bench

#: Characters that show as nothing (Unicode's default-ignorable code points that are not
#: format characters: a grapheme joiner, variation selectors, Hangul fillers, Khmer inherent
#: vowels, Mongolian variation selectors...): ``olga`` with one is ``olga`` to a reader.
INVISIBLE = ["\u034f", "\ufe0f", "\ufe00", "\u3164", "\u115f", "\u1160", "\uffa0",
             "\u17b4", "\u180b", "\U000e0100"]


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("token-names"),
                           two_person_output_enable=True)


@pytest.mark.parametrize(("raw", "normal"), [
    ("olga", "olga"), ("Olga", "olga"), ("olga ", "olga"), ("  OLGA\t", "olga"),
    ("ol\u200bga", "olga"), ("\u2060Olga\u200e", "olga"), ("Ｏｌｇａ", "olga"),
    ("Straße", "strasse"), ("ada  lovelace", "ada lovelace"), ("\u00a0bot\u00a0", "bot"),
    *((f"ol{mark}ga{mark}", "olga") for mark in INVISIBLE),
    ("olga\u2800", "olga"), ("ada\u2800lovelace", "ada lovelace"),
])
def test_normalize_name(raw: str, normal: str) -> None:
    assert normalize_name(raw) == normal
    assert normalize_name(normalize_name(raw)) == normalize_name(raw)


def create(bench: Bench, name: str, role: str = "operator") -> httpx.Response:
    with bench.http("ada") as h:
        return h.post("/v1/tokens", json={"name": name, "role": role})


@pytest.mark.parametrize("spelling", ["Olga", "olga ", " OLGA", "olga", "ol\u200bga",
                                      "Ｏｌｇａ", "olga\u2800",
                                      *(f"olga{mark}" for mark in INVISIBLE)])
def test_a_second_spelling_of_a_name_is_refused_over_http(bench: Bench,
                                                          spelling: str) -> None:
    r = create(bench, spelling)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert "is taken" in r.json()["reason"] and "'olga'" in r.json()["reason"]
    assert r.json()["errors"][0]["loc"] == ["body", "name"]
    with bench.http("ada") as h:
        names = [t["name"] for t in h.get("/v1/tokens").json() if not t["revokedAt"]]
    assert names.count("olga") == 1


def test_new_names_are_stored_normalized_and_verify_as_one_person(bench: Bench) -> None:
    r = create(bench, "  Petra  Q ", "requester")
    assert r.status_code == 201, r.text
    assert r.json()["name"] == "petra q"
    with httpx.Client(base_url=bench.url, timeout=10,
                      headers={"Authorization": f"Bearer {r.json()['token']}"}) as h:
        run = h.post("/v1/runs", json={"kind": "script"}).json()
        assert run["principal"] == "petra q"
    with bench.http("ada") as h:  # a revocation names the person in any spelling
        assert h.delete("/v1/tokens/PETRA Q").json() == {"revoked": 1}
    assert create(bench, "Petra Q", "requester").status_code == 201, "free once revoked"


def test_cli_token_create_refuses_a_second_spelling(bench: Bench) -> None:
    env = {**os.environ, "BENCH_GATE_HOME": str(bench.db.parent)}
    out = subprocess.run([sys.executable, "-m", "bench_gate.cli", "token", "create",
                          "--name", "Oscar ", "--role", "operator", "--db", str(bench.db)],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode != 0, out.stdout
    assert "is taken" in out.stderr and "'oscar'" in out.stderr, out.stderr
    assert TOKEN_PREFIX not in out.stdout, "no token was printed"


def _legacy_token(bench: Bench, name: str, role: str) -> str:
    """A token written before names were normalized (straight into the store, as an old
    gateway would have kept it): its holder must still count as the same person."""
    assert bench.server.running is not None
    secret = TOKEN_PREFIX + "legacy" + hashlib.sha256(name.encode()).hexdigest()[:32]
    bench.server.running.gateway.store.kv_put(
        "tokens", hashlib.sha256(secret.encode()).hexdigest(),
        {"id": f"tok-legacy-{len(name)}-{role}", "name": name, "role": role,
         "created_at": "2024-01-01T00:00:00+00:00", "revoked_at": None})
    return secret


def _as(bench: Bench, secret: str) -> httpx.Client:
    return httpx.Client(base_url=bench.url, timeout=30,
                        headers={"Authorization": f"Bearer {secret}"})


def _grant(h: httpx.Client, run: str, tk: str, proposal: str, kind: str) -> httpx.Response:
    return h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                  json={"approve": [kind], "proposalHash": proposal})


def test_two_spellings_of_one_person_are_one_approver(bench: Bench) -> None:
    olga_again = _legacy_token(bench, "Olga ", "operator")
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "script"}).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi", json={
            "instrument": "psu", "command": "VOLT 1.5,(@2);:CURR 0.2,(@2);:OUTP ON,(@2)"})
        assert r.status_code == 202, r.text
        tk = r.json()["takeover"]["id"]
    with bench.http("olga") as h:
        proposal = shown_hash(h, tk)
        assert _grant(h, run, tk, proposal, "setpoint").status_code == 200
    with _as(bench, olga_again) as h:
        assert h.get("/v1/runs", params={"limit": 1}).status_code == 200
        second = _grant(h, run, tk, proposal, "output_enable")
    assert second.status_code == 403, second.text
    assert "second person" in second.json()["reason"]
    assert bench.psu("OUTP? (@2)") == "0"


def test_a_second_spelling_of_the_requester_cannot_approve_its_request(bench: Bench) -> None:
    bot_operator = _legacy_token(bench, " BOT", "operator")
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "script"}).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                 "command": "VOLT 0.5,(@2)"})
        tk: dict[str, Any] = r.json()["takeover"]
    with _as(bench, bot_operator) as h:
        refused = _grant(h, run, tk["id"], tk["proposalHash"], "setpoint")
    assert refused.status_code == 403, refused.text
    assert "cannot approve it" in refused.json()["reason"]


@pytest.mark.parametrize("mark", INVISIBLE)
def test_an_invisible_mark_in_a_name_is_not_a_second_approver(bench: Bench, mark: str) -> None:
    """``bot`` plus a character that shows as nothing (a token made for it before names
    lost such characters, or by a careless admin pasting the name) is ``bot``: it cannot
    approve bot's own request, proven on the PSU's own port."""
    secret = TOKEN_PREFIX + "invisible" + hashlib.sha256(mark.encode()).hexdigest()[:32]
    assert bench.server.running is not None
    bench.server.running.gateway.store.kv_put(
        "tokens", hashlib.sha256(secret.encode()).hexdigest(),
        {"id": f"tok-invisible-{ord(mark[0]):x}", "name": f"bot{mark}", "role": "operator",
         "created_at": "2024-01-01T00:00:00+00:00", "revoked_at": None})
    before = bench.psu("VOLT? (@3)")
    volts = f"{1 + INVISIBLE.index(mark) / 8:.3f}"  # a value no other case sets
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "script"}).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                 "command": f"VOLT {volts},(@3)"})
        assert r.status_code == 202, r.text
        tk: dict[str, Any] = r.json()["takeover"]
    with _as(bench, secret) as h:
        assert h.get("/v1/runs", params={"limit": 1}).status_code == 200
        refused = _grant(h, run, tk["id"], tk["proposalHash"], "setpoint")
    assert refused.status_code == 403, refused.text
    assert "cannot approve it" in refused.json()["reason"]
    assert bench.psu("VOLT? (@3)") == before


@pytest.mark.parametrize("name", ["script@127.0.0.1", "Script@127.0.0.1", "script@::1",
                                  "script@lab-pc"])
def test_the_socket_doors_name_for_a_tokenless_connection_is_no_tokens_name(
        bench: Bench, name: str) -> None:
    """``script@<address>`` is the principal of a socket-door connection without a token:
    a token of that name would own those runs (see, cancel, release them)."""
    r = create(bench, name)
    assert r.status_code == 422, r.text
    assert "socket door" in r.json()["reason"]
    assert r.json()["errors"][0]["loc"] == ["body", "name"]
    with bench.http("ada") as h:
        names = [t["name"] for t in h.get("/v1/tokens").json()]
    assert not any(n.startswith("script@") for n in names)
