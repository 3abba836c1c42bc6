"""Through the doors people use: two operators decide over HTTP, and the first one's token
is revoked between their approvals, over HTTP or by ``bench-gate token revoke`` on the store
from another process (the serving gateway is not told). The first approval stops counting
at once; the simulator's own port shows nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from .._http_bench import Bench, shown_hash, start_bench
from .test_quotas import requester
from .test_revocation import (
    revoke_from_another_process,
    revoke_over_http,
    status_of,
    until,
)


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("revoked-approvals"))


def operator(bench: Bench, name: str) -> None:
    with bench.http("ada") as h:
        r = h.post("/v1/tokens", json={"name": name, "role": "operator"})
        assert r.status_code == 201, r.text
        bench.tokens[name] = str(r.json()["token"])


def grant(bench: Bench, who: str, run: str, tk: str, kind: str) -> dict[str, Any]:
    with bench.http(who) as h:
        r = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                   json={"approve": [kind], "proposalHash": shown_hash(h, tk)})
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body


@pytest.mark.parametrize("revoke", [revoke_over_http, revoke_from_another_process],
                         ids=["http", "another-process"])
def test_an_approval_by_a_token_revoked_before_the_second_one_never_energizes(
        bench: Bench, revoke: Callable[[Bench, str], None]) -> None:
    first, second = f"first-{revoke.__name__}", f"second-{revoke.__name__}"
    operator(bench, first)
    operator(bench, second)
    before = bench.psu("VOLT? (@1)"), bench.psu("OUTP? (@1)")
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "script"}).json()["id"]
        held = h.post(f"/v1/runs/{run}/scpi",
                      json={"instrument": "psu", "command": "VOLT 4.2,(@1);:OUTP ON,(@1)"})
        assert held.status_code == 202, held.text
        tk = held.json()["takeover"]["id"]
    grant(bench, first, run, tk, "setpoint")
    revoke(bench, first)
    with bench.http("olga") as h:  # what people are shown stops counting it within the sweep
        until(lambda: h.get(f"/v1/takeover/{tk}").json()["approvalsMissing"]
              == ["setpoint", "output_enable"], seconds=5)
    after = grant(bench, second, run, tk, "output_enable")
    assert after["request"]["status"] == "pending", after
    assert after["missing"] == ["setpoint"], after  # it says which approval is missing
    with bench.http("olga") as h:
        shown = h.get(f"/v1/takeover/{tk}").json()
        assert [a["by"] for a in shown["approvalsGiven"]] == [second], shown
        events = h.get(f"/v1/runs/{run}/journal").json()
        rows = events["events"] if isinstance(events, dict) else events
        assert any(e["type"] == "approval_withdrawn" and e["data"]["by"] == first
                   for e in rows), rows
    assert (bench.psu("VOLT? (@1)"), bench.psu("OUTP? (@1)")) == before


@pytest.mark.parametrize("revoke", [revoke_over_http, revoke_from_another_process],
                         ids=["http", "another-process"])
def test_a_revoked_requesters_http_run_closes_and_its_held_write_is_never_approved(
        bench: Bench, revoke: Callable[[Bench, str], None]) -> None:
    """A socket-door connection or an MCP session on a revoked token closes, and its run's
    held writes are cancelled; a run made over HTTP kept its held write approvable."""
    name = f"script-{revoke.__name__}"
    token = requester(bench, name)
    before = bench.psu("VOLT? (@1)")
    with httpx.Client(base_url=bench.url, timeout=30,
                      headers={"Authorization": f"Bearer {token}"}) as h:
        run = h.post("/v1/runs", json={"kind": "script"}).json()["id"]
        held = h.post(f"/v1/runs/{run}/scpi",
                      json={"instrument": "psu", "command": "VOLT 4.4,(@1)"})
        assert held.status_code == 202, held.text
        tk = held.json()["takeover"]["id"]
    revoke(bench, name)
    cancelled = until(lambda: (s := status_of(bench, tk))["status"] == "cancelled" and s,
                      seconds=5)
    assert "its token was revoked" in cancelled["outcome"]
    with bench.http("olga") as h:
        assert h.get(f"/v1/runs/{run}").json()["status"] == "closed"
        late = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                      json={"approve": ["setpoint"], "proposalHash": shown_hash(h, tk)})
        assert late.status_code == 409, late.text
    assert bench.psu("VOLT? (@1)") == before  # on the simulator's own port


def test_revoking_a_token_names_the_tokens_made_with_it(bench: Bench) -> None:
    """A leaked admin token may have made others: they outlive its revocation, so
    ``bench-gate token revoke`` names them (and ``token list`` says who made each)."""
    with bench.http("ada") as h:
        r = h.post("/v1/tokens", json={"name": "root-2", "role": "admin"})
        assert r.status_code == 201, r.text
        root = r.json()
    with httpx.Client(base_url=bench.url, timeout=30,
                      headers={"Authorization": f"Bearer {root['token']}"}) as h:
        made = h.post("/v1/tokens", json={"name": "mallory", "role": "operator"}).json()
        assert made["createdBy"] == root["id"], made

    def cli(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "bench_gate.cli", "token", *args,
                               "--db", str(bench.db)], capture_output=True, text=True,
                              timeout=60, env=dict(os.environ))
        assert done.returncode == 0, done.stderr
        return done.stdout

    listed = next(line for line in cli("list").splitlines() if made["id"] in line)
    assert listed.split()[-1] == root["id"]
    out = cli("revoke", "root-2")
    assert "revoked 1 token" in out
    assert f"{made['id']} mallory (operator)" in out, out
    assert "still active, made with it" in out
