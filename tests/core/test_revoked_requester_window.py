"""A requester's token revoked on the store by another process (``bench-gate token revoke``,
another gateway) is trusted by the HTTP door up to 2 s more (a verified token is not looked
up again meanwhile), and its run stayed open until the next sweep closed it (every 0.5 s).
In between, a write its standing plan covers ran unattended: the revoked token still drove
the instrument. Every write now refuses to run in a run whose requester's token was
revoked, whoever approved it, checked on the store at the moment it would run."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from bench_gate.auth import Tokens
from bench_gate.store import open_store

from .._http_bench import Bench, start_bench

SCOPE = {"instrument": "psu", "channels": [3], "voltage": [0, 3], "currentMax": 0.5,
         "maxWrites": 50, "timeoutMinutes": 30}


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("revoked-requester"))


def planned_run(bench: Bench, name: str) -> tuple[httpx.Client, str]:
    """A fresh requester ``name`` with a run and a standing plan on CH3 that olga approved,
    and its HTTP client (the door trusts its token 2 s from its last request)."""
    with bench.http("ada") as h:
        r = h.post("/v1/tokens", json={"name": name, "role": "requester"})
        assert r.status_code == 201, r.text
    client = httpx.Client(base_url=bench.url, timeout=30,
                          headers={"Authorization": f"Bearer {r.json()['token']}"})
    run = client.post("/v1/runs", json={"kind": "script"}).json()["id"]
    r = client.post(f"/v1/runs/{run}/plans", json=SCOPE)
    assert r.status_code == 202, r.text
    tk = r.json()["takeover"]
    with bench.http("olga") as h:
        r = h.post(f"/v1/runs/{run}/takeover/{tk['id']}/grant",
                   json={"approve": tk["required"], "proposalHash": tk["proposalHash"]})
        assert r.status_code == 200, r.text
        assert r.json()["request"]["status"] == "executed", r.text
    return client, run


def revoke_on_the_store(bench: Bench, name: str) -> None:
    """As ``bench-gate token revoke`` does: on the store, the serving gateway not told."""
    store = open_store(bench.db)
    try:
        assert Tokens(store).revoke(name) == 1
    finally:
        store.close()


def test_a_just_revoked_requester_never_spends_its_plan(bench: Bench) -> None:
    # A few tries: one lands between the revocation and the sweep that closes the run
    # (each does, but for the rare sweep that falls in the few ms in between).
    for attempt in range(3):
        volts = f"{1 + attempt / 4:.2f}"
        client, run = planned_run(bench, f"leaky-{attempt}")
        try:
            before = bench.psu("VOLT? (@3)")
            assert float(before) != float(volts)
            assert client.get(f"/v1/runs/{run}").status_code == 200  # verified: trusted 2 s
            revoke_on_the_store(bench, f"leaky-{attempt}")
            r = client.post(f"/v1/runs/{run}/scpi",
                            json={"instrument": "psu", "command": f"VOLT {volts},(@3)"})
        finally:
            client.close()
        assert r.status_code != 200 or r.json().get("status") != "executed", r.text
        assert bench.psu("VOLT? (@3)") == before  # on the simulator's own port
