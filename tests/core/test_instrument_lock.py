"""The instrument lock (issue 17, section 2): the gateway locks each lockable instrument to its
own connection at start and after a reconnect; another connection to the instrument may query
but gets an error for any write; the front panel is not covered; no client can free or steal
the lock through a door; the state is shown in GET /v1/instruments, `bench-gate status` and
the console, with a warning whenever the gateway does not hold it. Every check of the
instrument is made on the simulator's own port."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest
import pyvisa

from bench_gate.client import Client
from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.locking import UNLOCKED_WARNING, LockStatus
from bench_gate.mcp import CoreBench, HttpBench, ToolFailure
from bench_gate.models import Principal, Status
from bench_gate.scpi import ProfileError, get_profile
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread
from tests._http_bench import Bench, start_bench
from tests.conftest import Clock

PROFILES = Path(__file__).resolve().parents[2] / "bench_gate" / "profiles"


def direct(resource: str) -> Any:
    """Another client on the LAN: a plain pyvisa connection to the instrument's own port."""
    rm = pyvisa.ResourceManager("@py")
    return rm.open_resource(resource, read_termination="\n", write_termination="\n",
                            timeout=3000)


def owner(sim: SimBenchThread, which: str = "psu") -> str:
    res = direct(sim.psu_resource_name if which == "psu" else sim.dmm_resource_name)
    try:
        return str(res.query("SYST:LOCK:OWN?")).strip('"')
    finally:
        res.close()


async def test_locked_at_start_a_direct_connection_may_query_but_not_write(
        gateway: Gateway, sim: SimBenchThread) -> None:
    for name in ("psu", "dmm"):
        lock = gateway.instrument_lock(name)
        assert lock.status is LockStatus.LOCKED and lock.words == "locked", lock
        assert lock.warning is None
    assert owner(sim, "psu").startswith("LAN") and owner(sim, "dmm").startswith("LAN")
    psu = direct(sim.psu_resource_name)
    try:
        assert psu.query("*IDN?").startswith("Keysight Technologies,E36312A")
        assert Decimal(psu.query("MEAS:VOLT? (@1)")) == 0
        psu.write("VOLT 5,(@1)")
        error = psu.query("SYST:ERR?")
        assert error.startswith("-203,") and "locked" in error, error
        assert Decimal(psu.query("VOLT? (@1)")) == 0, "the setpoint is unchanged"
        assert psu.query("SYST:LOCK:REQ?") == "0"  # may not take it either
        psu.write("SYST:LOCK:REL")  # nor free it
        assert psu.query("SYST:ERR?").startswith("-203,")
        psu.write("OUTP ON,(@1)")
        assert psu.query("SYST:ERR?").startswith("-203,")
        assert int(psu.query("OUTP? (@1)")) == 0
    finally:
        psu.close()
    dmm = direct(sim.dmm_resource_name)
    try:
        dmm.write("CONF:RES")  # would drive a test current into the DUT
        assert dmm.query("SYST:ERR?").startswith("-203,")
        assert dmm.query("CONF?").startswith('"VOLT ')
    finally:
        dmm.close()
    assert owner(sim) == gateway_owner(sim)
    events = gateway.store.journal("bench:sim-bench:locks", limit=10)
    assert [(e.data["instrument"], e.data["status"], e.data["origin"]) for e in events] == [
        ("psu", "locked", "gateway"), ("dmm", "locked", "gateway")]
    assert events[0].data["sent"] == ["SYST:LOCK:REQ?"]


def gateway_owner(sim: SimBenchThread) -> str:
    return sim.psu.lock_owner or ""


async def test_front_panel_is_not_covered_and_the_recheck_and_read_back_still_work(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 4,(@1)")).request
    assert req is not None
    front_panel.write("VOLT 1.5,(@1)")  # the person at the bench: SIM:PANEL
    assert front_panel.query("SYST:ERR?").startswith("+0")
    result = await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    assert result.request.status is Status.STALE, "the live recheck read the panel's change"
    assert "ch1.voltage 0.0 → 1.5" in (result.request.outcome or "")
    fresh = gateway.get_request(result.request.superseded_by or "")
    done = await gateway.grant(fresh.id, olga, ["setpoint"], proposal_hash=fresh.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.request.outcome
    assert done.request.receipt is not None
    assert Decimal(front_panel.query("VOLT? (@1)")) == 4
    assert gateway.instrument_lock("psu").locked


async def test_a_restart_takes_the_lock_again_and_a_second_gateway_is_refused(
        config: BenchConfig, tmp_path: Path, clock: Clock, sim: SimBenchThread) -> None:
    first = Gateway(config, SqliteStore(tmp_path / "a.db"), clock=clock)
    await first.start()
    held_by = sim.psu.lock_owner
    second = Gateway(config, SqliteStore(tmp_path / "b.db"), clock=clock)
    await second.start()
    try:
        lock = second.instrument_lock("psu")
        assert lock.status is LockStatus.REFUSED
        assert lock.words == f"lock refused: held by {held_by}"
        assert lock.warning == UNLOCKED_WARNING
    finally:
        await second.close()
        second.store.close()
    assert sim.psu.lock_owner == held_by, "the refused gateway freed nothing"
    await first.close()
    first.store.close()
    third = Gateway(config, SqliteStore(tmp_path / "a.db"), clock=clock)
    await third.start()
    try:
        assert third.instrument_lock("psu").locked and third.instrument_lock("dmm").locked
        assert sim.psu.lock_owner not in (None, held_by)
    finally:
        await third.close()
        third.store.close()
    assert sim.psu.lock_owner is None, "the lock goes with the gateway's connection"


async def test_a_reconnect_takes_the_lock_again_at_once(
        gateway: Gateway, sim: SimBenchThread, script: Principal) -> None:
    lane = gateway.instrument("psu").lane
    before = sim.psu.lock_owner
    await lane.run(lambda link: link.close())  # the connection drops: the lock goes with it
    # The sweeper takes it again on a new connection, without waiting for the next job.
    for _ in range(100):
        if sim.psu.lock_owner not in (None, before):
            break
        await asyncio.sleep(0.05)
    assert sim.psu.lock_owner not in (None, before)
    assert gateway.instrument_lock("psu").locked
    run = gateway.create_run(script, "script")
    assert (await gateway.submit(run.id, "psu", "VOLT? (@1)")).status == "executed"
    events = gateway.store.journal("bench:sim-bench:locks", limit=10)
    assert [e.data["instrument"] for e in events] == ["psu", "dmm", "psu"]


async def test_no_door_lets_a_client_free_or_take_the_lock(
        gateway: Gateway, sim: SimBenchThread, script: Principal) -> None:
    run = gateway.create_run(script, "script")
    for message in ("SYST:LOCK:REL", "syst:lock:release", "SYSTem:LOCK:REQuest?",
                    "VOLT? (@1);:SYST:LOCK:REL", ":SYST:LOCK:REQ?;:SYST:LOCK:OWN?"):
        result = await gateway.submit(run.id, "psu", message)
        assert result.status == "refused", (message, result)
        assert "forbidden through the gateway" in (result.reason or ""), result.reason
    agent = CoreBench(gateway, Principal(name="agent-1"))
    shown = {i.name: i for i in await agent.instruments()}
    assert shown["psu"].lock == "locked" and shown["psu"].lock_warning is None
    agent_run = await agent.create_run("try the lock")
    with pytest.raises(ToolFailure, match="forbidden through the gateway"):
        await agent.submit(agent_run, "psu", "SYST:LOCK:REL")
    # The owner may be asked: it names the gateway's own interface.
    asked = await gateway.submit(run.id, "psu", "SYST:LOCK:OWN?")
    assert asked.status == "executed" and asked.response == f'"{sim.psu.lock_owner}"'
    assert gateway.instrument_lock("psu").locked and sim.psu.lock_owner is not None


def test_a_lock_section_a_client_could_get_around_is_refused(tmp_path: Path) -> None:
    text = (PROFILES / "e36312a.yaml").read_text(encoding="utf-8")
    text = text.replace("name: e36312a", "name: lock-hole-test")
    text = text.replace('  - header: "SYSTem:LOCK:RELease"\n    set: {effect: forbidden}',
                        '  - header: "SYSTem:LOCK:RELease"\n    set: {effect: state}')
    path = tmp_path / "lock-hole-test.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ProfileError, match=re.escape(
            "lock.release 'SYST:LOCK:REL' must be a forbidden header")):
        get_profile(str(path))


# ------------------------------------------------------------ served: HTTP, socket door, CLI
@pytest.fixture
def served(tmp_path: Path) -> Iterator[Bench]:
    """The simulated bench behind a served gateway, plus ``aux``: an instrument without a
    lock section (the generic profile)."""
    yield from start_bench(tmp_path, unlockable=True)


def test_served_status_socket_door_and_the_warning(served: Bench) -> None:
    url, tokens, sim = served.url, served.tokens, served.sim
    with served.http("bot") as h:
        listed = {i["name"]: i for i in h.get("/v1/instruments").json()}
        run = h.post("/v1/runs", json={"kind": "script"}).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                  "command": "SYST:LOCK:REL"})
        assert r.status_code == 422 and "forbidden" in r.text, r.text
    assert listed["psu"]["lock"] == "locked" and listed["psu"]["locked"] is True
    assert listed["psu"]["lockWarning"] is None and listed["dmm"]["lock"] == "locked"
    assert listed["aux"]["lock"] == "not lockable" and listed["aux"]["locked"] is False
    assert listed["aux"]["lockWarning"] == UNLOCKED_WARNING
    # A script on the socket door tries to free the gateway's lock.
    host, port = listed["psu"]["doorHost"], listed["psu"]["doorPort"]
    script = direct(f"TCPIP0::{host}::{port}::SOCKET")
    try:
        script.write("SYST:LOCK:REL")
        error = script.query("SYST:ERR?")
        assert error.startswith("-203,") and "forbidden" in error, error
        script.write("SYSTem:LOCK:REQuest?")  # refused: no answer is owed, as on an instrument
        error = script.query("SYST:ERR?")
        assert error.startswith("-203,") and "forbidden" in error, error
    finally:
        script.close()
    held_by = sim.psu.lock_owner
    assert held_by is not None
    psu = direct(sim.psu_resource_name)
    try:
        psu.write("VOLT 5,(@1)")
        assert psu.query("SYST:ERR?").startswith("-203,"), "still locked to the gateway"
        assert Decimal(psu.query("VOLT? (@1)")) == 0
    finally:
        psu.close()
    assert sim.psu.lock_owner == held_by
    env = {**os.environ, "BENCH_GATE_TOKEN": tokens["olga"]}
    shown = subprocess.run([sys.executable, "-m", "bench_gate.cli", "--url", url, "status"],
                           capture_output=True, text=True, env=env, timeout=60)
    assert shown.returncode == 0, shown.stderr
    lines = {line.split()[0]: line for line in shown.stdout.splitlines() if line.strip()}
    # The LOCK column, then ANSWERS (whether the instrument answered as its profile says).
    assert lines["psu"].split()[-2:] == ["locked", "yes"], lines["psu"]
    assert lines["dmm"].split()[-2] == "locked", lines["dmm"]
    assert "not lockable" in lines["aux"]
    assert f"WARNING aux: not lockable: {UNLOCKED_WARNING}" in shown.stdout
    # MCP over HTTP shows the same to an agent.
    with Client(url, tokens["bot"]) as client:
        agent = {i.name: i for i in anyio.run(HttpBench(client).instruments)}
    assert agent["psu"].lock == "locked" and agent["aux"].lock == "not lockable"
    assert agent["aux"].lock_warning == UNLOCKED_WARNING
