"""The emergency stop through every door: the core, HTTP, the CLI, the socket door (while
a held write blocks the connection), MCP, and the console's button in Chromium. Every check
of the instrument is made on the simulator's own port."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pyvisa

from bench_gate.config import BenchConfig
from bench_gate.errors import PermissionDenied
from bench_gate.gateway import Gateway
from bench_gate.mcp import CoreBench
from bench_gate.models import Principal, RunStatus, Status
from bench_gate.store import SqliteStore
from tests._browser import PHONE, sign_in
from tests._http_bench import Bench, shown_hash, start_bench
from tests.conftest import Clock


def outputs(front_panel: Any) -> list[int]:
    return [int(front_panel.query(f"OUTP? (@{ch})")) for ch in (1, 2, 3)]


async def energize(gw: Gateway, who: Principal, olga: Principal) -> str:
    run = gw.create_run(who, "script")
    req = (await gw.submit(run.id, "psu", "VOLT 2,(@1);:OUTP ON,(@1)")).request
    assert req is not None
    done = await gw.grant(req.id, olga, ["setpoint", "output_enable"],
                          proposal_hash=req.proposal_hash)
    assert done.request.status is Status.EXECUTED
    return run.id


async def test_stop_makes_everything_safe_and_refuses_writes_until_cleared(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    run_id = await energize(gateway, script, olga)
    front_panel.write("OUTP 1,(@3)")  # someone switched CH3 on at the front panel
    waiting = (await gateway.submit(run_id, "psu", "VOLT 3,(@2)")).request
    assert waiting is not None
    done = await gateway.emergency_stop(script, "test")  # a requester may press it
    assert outputs(front_panel) == [0, 0, 0]
    assert done["instruments"]["psu"]["read_back"] == {
        "ch1.output": "0", "ch2.output": "0", "ch3.output": "0"}
    assert waiting.id in done["cancelled"]
    assert gateway.get_request(waiting.id).status is Status.CANCELLED
    assert gateway.get_run(run_id).status is RunStatus.SUSPENDED
    other = gateway.create_run(Principal(name="bot2"), "script")
    refused = await gateway.submit(other.id, "psu", "VOLT 1,(@1)")
    assert refused.status == "refused" and "psu is stopped" in refused.reason
    assert (await gateway.submit(other.id, "psu", "VOLT? (@1)")).status == "executed"
    with pytest.raises(PermissionDenied):
        gateway.clear_stop(script)
    assert sorted(gateway.clear_stop(olga)) == ["dmm", "psu"]
    assert gateway.stopped() == {}
    assert (await gateway.submit(other.id, "psu", "VOLT 1,(@1)")).status == "pending"
    # The envelope watch may find CH3 (switched on at the panel) first: its own event.
    kinds = [e.type.value for e in gateway.store.journal("bench:sim-bench", limit=10)
             if e.type.value != "envelope_breach"]
    assert kinds == ["emergency_stop", "stop_cleared"]


async def test_stop_survives_a_restart(config: BenchConfig, db_path: Path, clock: Clock,
                                       script: Principal, olga: Principal) -> None:
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    await gw.emergency_stop(olga, "test", "psu")
    await gw.close()
    gw.store.close()
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        assert set(gw.stopped()) == {"psu"}
        run = gw.create_run(script, "script")
        assert (await gw.submit(run.id, "psu", "VOLT 1,(@1)")).status == "refused"
    finally:
        await gw.close()
        gw.store.close()


async def test_stop_jumps_the_queue_and_cuts_a_write_short(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    """A long write is on the lane and more jobs wait behind it: the stop runs as soon as
    the unit being sent finishes, before the rest of the write and the queue."""
    inst = gateway.instrument("psu")
    orig_write = inst.lane.link.write
    sent: list[str] = []

    async def slow_write(command: str) -> None:
        sent.append(command)
        if command.startswith("VOLT"):
            await asyncio.sleep(0.05)
        await orig_write(command)

    inst.lane.link.write = slow_write  # type: ignore[method-assign]
    run = gateway.create_run(script, "script")
    ramp = ";".join(f":VOLT {n / 10},(@1)" for n in range(1, 21)).lstrip(":")
    req = (await gateway.submit(run.id, "psu", ramp)).request
    assert req is not None
    writing = asyncio.ensure_future(gateway.grant(req.id, olga, ["setpoint"],
                                                  proposal_hash=req.proposal_hash))
    while len(sent) < 3:
        await asyncio.sleep(0.01)
    started = time.perf_counter()
    await gateway.emergency_stop(olga, "test", "psu")
    assert time.perf_counter() - started < 1.0
    final = (await writing).request
    assert sum(1 for c in sent if c.startswith("VOLT")) < 20, "the write was cut short"
    assert "emergency stop" in (final.outcome or "")
    assert outputs(front_panel) == [0, 0, 0]


# --------------------------------------------------------------------- the other doors
@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    yield from start_bench(tmp_path)


def panel(bench: Bench) -> list[int]:
    return [int(bench.psu(f"OUTP? (@{ch})")) for ch in (1, 2, 3)]


def switch_on(bench: Bench) -> None:
    with bench.http("bot") as h, bench.http("olga") as o:
        run = h.post("/v1/runs", json={"kind": "script"}).json()["id"]
        tk = h.post(f"/v1/runs/{run}/scpi", json={
            "instrument": "psu", "command": "VOLT 2,(@1);:OUTP ON,(@1)"}).json()["takeover"]
        r = o.post(f"/v1/runs/{run}/takeover/{tk['id']}/grant", json={
            "approve": ["setpoint", "output_enable"], "proposalHash": shown_hash(o, tk["id"])})
        assert r.json()["request"]["status"] == "executed"
    assert panel(bench)[0] == 1


def test_http_and_cli(bench: Bench) -> None:
    switch_on(bench)
    with bench.http("bot") as h:
        r = h.post("/v1/bench/stop", json={"instrument": "psu"})
        assert r.status_code == 200, r.text
        assert r.json()["by"] == "bot" and r.json()["door"] == "HTTP API"
        assert panel(bench) == [0, 0, 0]
        assert "psu" in h.get("/v1/bench/stop").json()["stopped"]
        assert h.post("/v1/bench/stop/clear", json={}).status_code == 403
    env = {**os.environ, "BENCH_GATE_TOKEN": bench.tokens["olga"]}
    cleared = subprocess.run([sys.executable, "-m", "bench_gate.cli", "--url", bench.url,
                              "stop", "--clear"], capture_output=True, text=True, env=env,
                             timeout=60)
    assert cleared.returncode == 0, cleared.stderr
    assert "stop cleared: psu" in cleared.stdout
    switch_on(bench)
    with bench.http("bot") as h:  # one request held: the stop cancels it
        run = h.post("/v1/runs", json={"kind": "script"}).json()["id"]
        assert h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                    "command": "VOLT 3,(@2)"}).status_code == 202
    stopped = subprocess.run([sys.executable, "-m", "bench_gate.cli", "--url", bench.url,
                              "stop", "--all"], capture_output=True, text=True, env=env,
                             timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    assert "; 1 request cancelled, 1 run suspended; " in stopped.stdout  # was "1 requests"
    assert (f"psu ({bench.sim.psu_resource_name}): sent OUTP:DEL:FALL 0.0,(@1); OUTP 0,(@1); "
            "OUTP:DEL:FALL 0.0,(@2); "
            "OUTP 0,(@2); OUTP:DEL:FALL 0.0,(@3); OUTP 0,(@3)") in stopped.stdout
    assert panel(bench) == [0, 0, 0]


def test_socket_door_stop_while_a_held_write_blocks_the_connection(bench: Bench) -> None:
    switch_on(bench)
    host, port = bench.server.running.doors["psu"]
    rm = pyvisa.ResourceManager("@py")
    script: Any = rm.open_resource(f"TCPIP0::{host}::{port}::SOCKET", read_termination="\n",
                                   write_termination="\n", timeout=15000)
    try:
        script.write("VOLT 4,(@2)")  # held: this connection now waits for a person
        time.sleep(0.3)
        script.write("GATE:STOP")  # taken at once, not behind the held write
        deadline = time.monotonic() + 5
        while panel(bench) != [0, 0, 0] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert panel(bench) == [0, 0, 0]
        error = str(script.query("SYST:ERR?"))
        assert error.startswith("-203") and "cancelled" in error, error
        assert float(bench.psu("VOLT? (@2)")) == 0
    finally:
        script.close()


async def test_mcp_tool(gateway: Gateway, olga: Principal, front_panel: Any) -> None:
    await energize(gateway, Principal(name="agent-1"), olga)
    done = await CoreBench(gateway, Principal(name="agent-1")).emergency_stop(None)
    assert done["door"] == "MCP" and outputs(front_panel) == [0, 0, 0]


def test_console_button_for_a_requester(browser: Any, bench: Bench) -> None:
    switch_on(bench)
    pg = sign_in(browser, bench, "bot", PHONE)
    try:
        for path in ("/", "/history", "/instruments/psu"):
            pg.goto(bench.url + path)
            assert pg.locator("#emergency-stop").is_visible(), path
        pg.click("#emergency-stop")
        pg.wait_for_selector("p.flash.error")
        assert "EMERGENCY STOP by bot" in pg.inner_text("p.flash.error")
    finally:
        pg.context.close()
    assert panel(bench) == [0, 0, 0]
