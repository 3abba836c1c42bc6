"""A real bench-gate server for HTTP tests: uvicorn on a free port, a temporary store, the
simulated bench (SimBenchThread), and a clock the tests can move forward."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pyvisa

from bench_gate.auth import Tokens
from bench_gate.config import InstrumentConfig, default_config
from bench_gate.models import now
from bench_gate.server import ServerThread
from bench_gate.store import open_store
from sim_instruments import SimBenchThread


class Clock:
    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return now() + self.offset

    def advance(self, **kw: float) -> None:
        self.offset += timedelta(**kw)


@dataclass
class Bench:
    url: str
    sim: SimBenchThread
    server: ServerThread
    clock: Clock
    tokens: dict[str, str]  # who -> secret
    db: Path

    def http(self, who: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def psu(self, query: str) -> str:
        """Ask the simulated PSU directly over pyvisa-py, bypassing the gateway."""
        # Not rm.close(): pyvisa shares one ResourceManager per backend in a process, and
        # closing it would close the gateway's own sessions too.
        rm = pyvisa.ResourceManager("@py")
        res: Any = rm.open_resource(self.sim.psu_resource_name, read_termination="\n",
                                    write_termination="\n")
        try:
            return str(res.query(query)).strip()
        finally:
            res.close()


def shown_hash(h: httpx.Client, tk: str) -> str:
    """The proposal hash of a request as its reader is shown it now (GET /v1/takeover/{tk}):
    what a grant or a denial names."""
    r = h.get(f"/v1/takeover/{tk}")
    assert r.status_code == 200, r.text
    return str(r.json()["proposalHash"])


def suspended_run(bench: Bench, requester: str, denier: str) -> tuple[str, str]:
    """A script run of ``requester`` that ``denier`` suspended, denying three writes of it
    (the default policy's ``denials_in_a_row``) over HTTP: the run, and its last request."""
    with bench.http(requester) as h:
        r = h.post("/v1/runs", json={"kind": "script", "goal": "denied until suspended"})
        assert r.status_code == 201, r.text
        run = str(r.json()["id"])
        for i in range(3):
            held = h.post(f"/v1/runs/{run}/scpi",
                          json={"instrument": "psu", "command": f"VOLT {i + 1},(@1)"})
            assert held.status_code == 202, held.text
            tk = held.json()["takeover"]["id"]
            with bench.http(denier) as d:
                no = d.post(f"/v1/runs/{run}/takeover/{tk}/deny",
                            json={"notes": f"no {i}", "proposalHash": shown_hash(d, tk)})
                assert no.status_code == 200, no.text
        assert h.get(f"/v1/runs/{run}").json()["status"] == "suspended"
    return run, tk


def start_bench(tmp: Path, *, limits: dict[str, Any] | None = None, unlockable: bool = False,
                store_url: str | None = None, **policy: Any) -> Iterator[Bench]:
    """``policy`` sets ``[policy]`` keys, ``limits`` the ``[limits]`` ones. ``unlockable``
    adds ``aux``: the simulated meter again, under the generic profile, which has no lock
    section (an instrument the gateway cannot lock; it only reads it). ``store_url``: a
    store other than ``tmp``'s SQLite file (a PostgreSQL database)."""
    with SimBenchThread() as sim:
        config = default_config(sim.psu_port, sim.dmm_port)
        if unlockable:
            config.instruments.append(InstrumentConfig(
                name="aux", resource=sim.dmm_resource_name, profile="generic"))
        for ic in config.instruments:
            ic.socket_port = 0
        for key, value in policy.items():
            setattr(config.policy, key, value)
        for key, value in (limits or {}).items():
            setattr(config.limits, key, value)
        db = tmp / "bench.db"
        store = open_store(store_url or db)
        tokens = Tokens(store)
        secrets = {
            "bot": tokens.create("bot", "requester")[1],
            "bot2": tokens.create("bot2", "requester")[1],
            "olga": tokens.create("olga", "operator")[1],
            "oscar": tokens.create("oscar", "operator")[1],
            "ada": tokens.create("ada", "admin")[1],
        }
        clock = Clock()
        server = ServerThread(config, store, clock=clock)
        try:
            yield Bench(server.url, sim, server, clock, secrets, db)
        finally:
            server.close()
            store.close()
