"""A run's heartbeat term over HTTP (bench_gate/terms.py): ``heartbeatSeconds`` on
``POST /v1/runs``, checked (a 422 problem saying why), shown on the run and in the OpenAPI
schema; ``POST /v1/runs/{id}/heartbeat`` by whom, and on a closed run."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench_gate.client import ApiError, Client
from bench_gate.terms import MAX_TERM, MIN_TERM

from ..._http_bench import Bench, start_bench
from ..cli.test_cli_vocabulary import run_main


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(Path(tmp_path_factory.mktemp("terms")))


@pytest.mark.parametrize("bad", [0, -1, MIN_TERM - 1, MAX_TERM + 1, 2**70, 2.5, "5", True,
                                 None])
def test_a_term_out_of_bounds_is_a_422_saying_why(bench: Bench, bad: Any) -> None:
    body = {"kind": "agent", "heartbeatSeconds": bad}
    with bench.http("bot") as h:
        before = len(h.get("/v1/runs").json())
        r = h.post("/v1/runs", json=body)
        if bad is None:  # no term: a run as before
            assert r.status_code == 201 and r.json()["heartbeatSeconds"] is None
            return
        assert r.status_code == 422, r.text
        problem = r.json()
        assert problem["reason"].startswith("body.heartbeatSeconds: "), problem
        assert len(h.get("/v1/runs").json()) == before, "nothing was created"


@settings(max_examples=40, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture])
@given(st.integers(min_value=-10, max_value=10) | st.integers(MAX_TERM - 5, MAX_TERM + 5)
       | st.integers())
def test_every_whole_term_within_bounds_is_taken_and_none_outside(bench: Bench,
                                                                  term: int) -> None:
    with bench.http("bot") as h:
        r = h.post("/v1/runs", json={"kind": "agent", "heartbeatSeconds": term})
        if MIN_TERM <= term <= MAX_TERM:
            assert r.status_code == 201, r.text
            assert r.json()["heartbeatSeconds"] == term
            h.post(f"/v1/runs/{r.json()['id']}/close")
        else:
            assert r.status_code == 422, r.text


def test_the_term_is_in_the_openapi_schema(bench: Bench) -> None:
    with bench.http(None) as h:
        schema = h.get("/openapi.json").json()
    created = schema["components"]["schemas"]["RunCreate"]["properties"]["heartbeatSeconds"]
    shown = next(s for s in created.get("anyOf", [created]) if s.get("type") == "integer")
    assert shown["minimum"] == MIN_TERM and shown["maximum"] == MAX_TERM
    assert "heartbeatSeconds" in schema["components"]["schemas"]["RunOut"]["properties"]
    beat = schema["paths"]["/v1/runs/{run_id}/heartbeat"]["post"]
    assert "409" in beat["responses"]


def test_the_client_heartbeats_and_a_closed_run_is_a_conflict(bench: Bench) -> None:
    """Another requester's heartbeat is refused; one on a closed run renews nothing and
    says why (409), so a client learns its run was closed."""
    with Client(bench.url, bench.tokens["bot"]) as bot, \
            Client(bench.url, bench.tokens["bot2"]) as other:
        run = bot.run("agent", "terms", heartbeat_seconds=MIN_TERM)
        assert run["heartbeatSeconds"] == MIN_TERM
        beat = bot.heartbeat()
        assert beat["heartbeatSeconds"] == MIN_TERM and beat["secondsLeft"] > 1
        with pytest.raises(ApiError) as denied:
            other.heartbeat(run["id"])
        assert denied.value.status == 403
        time.sleep(MIN_TERM + 1.0)  # silent for a term: the gateway closes it
        with pytest.raises(ApiError) as closed:
            bot.heartbeat()
        assert closed.value.status == 409
        assert "client gone: no heartbeat for 2 s" in closed.value.reason
        assert bot.request("GET", f"/v1/runs/{run['id']}")["status"] == "closed"


def test_watch_shows_a_silent_clients_run_closing(
        bench: Bench, capsys: pytest.CaptureFixture[str]) -> None:
    """``bench-gate watch`` shows the alert and the run closed, with why. Before, any
    alert (it has no id: a lost lease, an emergency stop, this) ended the watch with a
    KeyError traceback."""
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "agent", "heartbeatSeconds": MIN_TERM}
                     ).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu", "command":
                                                 "VOLT 0.7,(@2)"})
        assert r.status_code == 202, r.text
    code, out, err = run_main(bench, "olga", capsys, "watch", "--timeout", str(MIN_TERM + 2))
    assert code == 0, err
    assert re.search(rf"alert    client_gone  {run}: client gone: no heartbeat for "
                     rf"{MIN_TERM} s", out), out
    assert re.search(rf"run      {run}  closed  \(client gone: no heartbeat", out), out
