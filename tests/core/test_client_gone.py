"""A gone client's request never runs, across a crash too.

A script on the socket door sends a held write; the real ``bench-gate serve`` is SIGKILLed
and started again on the same store. The script's connection died with the process, so its
request is cancelled ("client gone") and its run closed; granting it is a conflict, and the
simulator's own port shows the write never landed.
"""

from __future__ import annotations

import socket
import time
from decimal import Decimal
from pathlib import Path

from bench.crash import Bench, free_port
from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, RunStatus, Status
from bench_gate.store import SqliteStore
from tests.conftest import Clock


def _wait_for(check: object, timeout: float = 20) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()  # type: ignore[operator]
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError("condition not met")


def test_socket_door_request_of_a_killed_gateway_never_runs(tmp_path: Path) -> None:
    bench = Bench(tmp_path, seed=3)
    door = free_port()
    text = bench.config.read_text().replace('profile = "e36312a"\n',
                                            f'profile = "e36312a"\nsocket_port = {door}\n', 1)
    bench.config.write_text(text)
    try:
        bench.start()
        script = socket.create_connection(("127.0.0.1", door), timeout=5)
        script.sendall(b"VOLT 2.5,(@3)\n")
        with bench.client("olga") as olga:
            pending = _wait_for(lambda: olga.get(
                "/v1/takeover", params={"status": "pending"}).json())
            assert isinstance(pending, list)
            tk = pending[0]
            bench.kill()
            script.close()
            bench.start()
            after = olga.get(f"/v1/takeover/{tk['id']}").json()
            assert after["status"] == "cancelled", after
            assert "client gone" in after["outcome"]
            run = olga.get(f"/v1/runs/{tk['runId']}").json()
            assert run["status"] == "closed"
            answer = olga.post(f"/v1/runs/{tk['runId']}/takeover/{tk['id']}/grant",
                               json={"approve": ["setpoint"],
                                     "proposalHash": tk["proposalHash"]})
            assert answer.status_code == 409
        with socket.create_connection(("127.0.0.1", bench.psu_port), timeout=5) as panel:
            panel.sendall(b"VOLT? (@3)\n")
            assert Decimal(panel.recv(100).decode().strip()) == 0
    finally:
        bench.close()


async def test_attached_runs_of_this_bench_close_at_start_others_stay(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal) -> None:
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    door = gw.create_run(script, "script", attached="socket")
    http = gw.create_run(script, "script")
    held = (await gw.submit(door.id, "psu", "VOLT 1,(@1)")).request
    kept = (await gw.submit(http.id, "psu", "VOLT 2,(@1)")).request
    assert held is not None and kept is not None
    # Another bench's connection on a shared store is not this bench's to close.
    gw.store.kv_put("attached_runs", "run-elsewhere", {"bench": "other", "door": "socket"})
    await gw.close()  # as a crash leaves it: no door closed its connections
    gw.store.close()

    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        assert gw.get_request(held.id).status is Status.CANCELLED
        assert gw.get_run(door.id).status is RunStatus.CLOSED
        assert gw.get_request(kept.id).status is Status.PENDING
        assert gw.get_run(http.id).status is RunStatus.ACTIVE
        assert gw.store.kv_get("attached_runs", "run-elsewhere") is not None
        assert gw.store.kv_get("attached_runs", door.id) is None
    finally:
        await gw.close()
        gw.store.close()
