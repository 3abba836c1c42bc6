"""An id holding a NUL character (``%00`` in a URL) on a PostgreSQL store: every door's
lookup said 503 "store error" (psycopg refuses to send a NUL, which PostgreSQL's text
cannot hold). Now it is not found, or another clear 4xx, as on SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import pg
from tests._http_bench import Bench, start_bench
from tests.doors.web.test_console_http import sign_in

pg_cluster = pg.pg_cluster

BAD = ["a%00b", "%00", "tk-%00"]


@pytest.fixture(scope="module")
def bench(pg_cluster: pg.PgCluster, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Bench]:
    yield from start_bench(Path(tmp_path_factory.mktemp("pg-nul")),
                           store_url=pg_cluster.new_database())


@pytest.mark.parametrize("bad", BAD)
def test_an_id_holding_nul_is_not_found_through_the_api(bench: Bench, bad: str) -> None:
    with bench.http("bot") as h, bench.http("olga") as o:
        run = h.post("/v1/runs", json={"kind": "script", "goal": "nul"}).json()["id"]
        scpi = {"instrument": "psu", "command": "MEAS:VOLT? (@1)"}
        found = {
            "run": h.get(f"/v1/runs/{bad}"),
            "journal": h.get(f"/v1/runs/{bad}/journal"),
            "requests of a run": h.get(f"/v1/runs/{bad}/takeover"),
            "request": h.get(f"/v1/takeover/{bad}"),
            "submit": h.post(f"/v1/runs/{bad}/scpi", json=scpi),
            "heartbeat": h.post(f"/v1/runs/{bad}/heartbeat"),
            "close": h.post(f"/v1/runs/{bad}/close"),
            "plan": h.get(f"/v1/runs/{run}/plans/{bad}"),
            "question": h.get(f"/v1/questions/{bad}"),
            "grant": o.post(f"/v1/runs/{run}/takeover/{bad}/grant",
                            json={"approve": ["setpoint"], "proposalHash": "0" * 64}),
            "deny": o.post(f"/v1/runs/{run}/takeover/{bad}/deny",
                           json={"notes": "no", "proposalHash": "0" * 64}),
            "release": o.post(f"/v1/runs/{bad}/release"),
            "take over": o.post(f"/v1/runs/{bad}/takeover/request", json={"reason": "r"}),
            "revoke a plan": o.post(f"/v1/runs/{run}/plans/{bad}/revoke"),
        }
        statuses = {what: r.status_code for what, r in found.items()}
        assert statuses == dict.fromkeys(found, 404), {
            what: r.text[:200] for what, r in found.items() if r.status_code != 404}
        listed = h.get("/v1/takeover", params={"instrument": bad.replace("%00", "\x00")})
        assert listed.status_code == 200 and listed.json() == [], listed.text


@pytest.mark.parametrize("bad", BAD)
def test_an_id_holding_nul_is_not_found_on_the_console(bench: Bench, bad: str) -> None:
    c, csrf = sign_in(bench, "olga")
    try:
        pages = {"run": c.get(f"/runs/{bad}"), "request": c.get(f"/requests/{bad}"),
                 "question": c.get(f"/questions/{bad}"),
                 "deny": c.post(f"/requests/{bad}/deny", data={"csrf": csrf, "notes": "n"})}
        assert {what: r.status_code for what, r in pages.items()} == dict.fromkeys(
            pages, 404), {what: r.text[:200] for what, r in pages.items()}
    finally:
        c.close()
