"""The HTTP API in front of an instrument its profile does not describe (bench.toml points
the E36312A's profile at a DP832): every message gets a problem naming what the profile
describes and what answered, ``GET /v1/instruments`` shows why, and the DP832's state is
unchanged on its own port (bench_gate/identity.py)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import httpx

from bench_gate.auth import Tokens
from bench_gate.config import default_config
from bench_gate.server import ServerThread
from bench_gate.store import open_store
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import own_port

E36312A = "Keysight Technologies,E36312A"
DP832 = "RIGOL TECHNOLOGIES,DP832"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def dp832_state(served: SimServedThread) -> tuple[str, str, str]:
    with own_port(served.resource_name) as res:
        return res.query("SOUR1:VOLT?"), res.query("SOUR1:CURR?"), res.query("OUTP? CH1")


def served(tmp: Path) -> Iterator[tuple[httpx.Client, SimServedThread, str]]:
    with SimBenchThread() as sim, SimServedThread("dp832") as dp832:
        config = default_config(sim.psu_port, sim.dmm_port)
        config.instruments[0].resource = dp832.resource_name  # the wrong resource
        for ic in config.instruments:
            ic.socket_port = 0
        store = open_store(tmp / "bench.db")
        secret = Tokens(store).create("bot", "requester")[1]
        operator = Tokens(store).create("olga", "operator")[1]
        server = ServerThread(config, store)
        try:
            with httpx.Client(base_url=server.url, timeout=30,
                              headers={"Authorization": f"Bearer {secret}"}) as h:
                yield h, dp832, operator
        finally:
            server.close()
            store.close()


def test_every_message_to_another_model_is_a_problem_naming_both(tmp_path: Path) -> None:
    for h, dp832, operator in served(tmp_path):
        before = dp832_state(dp832)
        run = h.post("/v1/runs", json={"kind": "script", "goal": "CH1 up"}).json()["id"]
        for command in ("MEAS:VOLT? (@1)", "VOLT? (@1)", "VOLT 2,(@1)", "OUTP ON,(@1)"):
            r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu", "command": command})
            assert r.status_code == 502, (command, r.status_code, r.text)
            body = r.json()
            assert body["type"].endswith("/wrong-instrument") and body["scpiCode"] == -241
            assert body["expected"] == [E36312A] and body["answered"].startswith(DP832)
            assert E36312A in body["detail"] and DP832 in body["detail"], body
        psu = next(i for i in h.get("/v1/instruments").json() if i["name"] == "psu")
        assert psu["identity"] == [E36312A] and psu["idn"].startswith(DP832), psu
        assert DP832 in psu["wrongInstrument"] and E36312A in psu["wrongInstrument"]
        state = h.get("/v1/instruments/psu/state")
        assert state.status_code == 502 and DP832 in state.json()["detail"]
        dmm = next(i for i in h.get("/v1/instruments").json() if i["name"] == "dmm")
        assert dmm["wrongInstrument"] is None  # the meter is the one its profile describes
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "dmm", "command": "*IDN?"})
        assert r.status_code == 200 and "34465A" in r.json()["response"], r.text
        # The console: a badge on every page, and the reason on the instrument's page.
        with httpx.Client(base_url=str(h.base_url), timeout=30) as c:
            csrf = CSRF.search(c.get("/login").text)
            assert csrf is not None
            c.post("/login", data={"csrf": csrf.group(1), "token": operator, "next": "/"})
            home = c.get("/").text
            assert "WRONG INSTRUMENT" in home and DP832 in html.unescape(home)
            page = html.unescape(c.get("/instruments/psu").text)
            assert 'id="wrong-instrument"' in page and E36312A in page and DP832 in page
        assert dp832_state(dp832) == before
