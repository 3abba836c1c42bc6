"""The emergency stop through the HTTP API and the console while PostgreSQL is down: each
door looked the caller's token up on the store (trusted 2 s without a lookup), and the
store was away, so STOP answered 503 and nothing was switched off. A token verified on
this gateway before is taken for the stop while the store is away (pressing it harms
nothing); the outputs go off, read on the simulator's own port."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pyvisa

from bench_gate.auth import VERIFIED_SECONDS
from tests import pg
from tests._http_bench import Bench, start_bench
from tests.doors.web.test_console_http import sign_in


@pytest.fixture(scope="module")
def cluster() -> Iterator[pg.PgCluster]:
    """A server of its own: the test stops it."""
    with pg.start_or_skip() as c:
        yield c


@pytest.fixture
def bench(cluster: pg.PgCluster, tmp_path: Path) -> Iterator[Bench]:
    try:
        yield from start_bench(tmp_path, store_url=cluster.new_database())
    finally:
        if not cluster.running:
            cluster.start()


@pytest.fixture
def panel(bench: Bench) -> Iterator[Any]:
    rm = pyvisa.ResourceManager("@py")
    res: Any = rm.open_resource(bench.sim.psu_resource_name, read_termination="\n",
                                write_termination="\n", timeout=2000)
    res.write("SIM:PANEL")
    yield res
    res.close()


def _on(panel: Any) -> None:
    panel.write("VOLT 1,(@1)")
    panel.write("OUTP ON,(@1)")
    assert panel.query("OUTP? (@1)").strip() == "1"


def test_the_stop_goes_through_the_api_and_the_console_while_the_store_is_down(
        bench: Bench, cluster: pg.PgCluster, panel: Any) -> None:
    console, csrf = sign_in(bench, "bot")  # a requester, signed in on the console
    try:
        with bench.http("olga") as api:
            assert api.get("/v1/bench/stop").status_code == 200  # olga's token, verified
            _on(panel)
            cluster.stop("immediate")
            time.sleep(VERIFIED_SECONDS + 0.2)  # no verification is trusted any more
            pressed = api.post("/v1/bench/stop", json={"instrument": "psu"})
            assert pressed.status_code == 200, pressed.text
            assert "storeError" in pressed.json(), pressed.json()
            assert panel.query("OUTP? (@1)").strip() == "0"
            _on(panel)
            pressed = console.post("/stop", data={"csrf": csrf})
            assert pressed.status_code == 303, pressed.text
            assert panel.query("OUTP? (@1)").strip() == "0"
            # Anything else still needs the store: no stale verification is trusted.
            assert api.get("/v1/runs").status_code == 503
    finally:
        console.close()
