"""A fenced gateway (another took its bench over) writes to no instrument again: not a
write that needs no approval either (a meter's settings, a status command, a selection)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from bench_gate.config import default_config
from bench_gate.errors import Refused
from bench_gate.federation import TABLE
from bench_gate.gateway import Gateway
from bench_gate.leases import LEASES
from bench_gate.lifecycle import SWEEP_SECONDS
from bench_gate.models import (
    Approval,
    ApprovalKind,
    Event,
    EventType,
    Principal,
    RunStatus,
    Status,
)
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread
from tests.conftest import own_port


async def _fenced(gw: Gateway) -> None:
    gw.store.kv_put(TABLE, gw.config.bench, {
        "instance": "the-other-one", "host": "elsewhere", "pid": 1,
        "heartbeat": 0.0, "rules": {}})  # gone since: the next start takes the bench
    deadline = time.monotonic() + 10
    while gw.core.registry.lost is None and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert gw.core.registry.lost is not None, "the beat never saw the other claim"


async def test_a_fenced_gateway_sends_no_unapproved_write_either(
        sim: SimBenchThread, tmp_path: Path, script: Principal) -> None:
    """A meter's function (measure-config) passes unattended on a live gateway; on a fenced
    one it reached the meter the other gateway now serves."""
    gw = Gateway(default_config(sim.psu_port, sim.dmm_port),
                 SqliteStore(tmp_path / "bench.db"))
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        with own_port(sim.dmm_resource_name, panel=True) as dmm:
            before = dmm.query("FUNC?").strip()
        await _fenced(gw)
        for message in ("CONF:CURR:DC", "MEAS:CURR:DC?", "*CLS", "SYST:BEEP"):  # unattended
            result = await gw.submit(run.id, "dmm", message)
            assert result.code == -203 and "no longer serves bench" in result.reason, \
                (message, result)
        with own_port(sim.dmm_resource_name, panel=True) as dmm:
            assert dmm.query("FUNC?").strip() == before
    finally:
        await gw.close()
        gw.store.close()


async def test_a_fenced_gateway_leaves_the_benchs_approved_requests_to_its_owner(
        sim: SimBenchThread, tmp_path: Path, script: Principal) -> None:
    """Both gateways serve one bench name on one store: the fenced one's sweep (and its
    PostgreSQL notices) took every approved request of the bench as its own, and failed
    it, -203: an approval the new owner recorded (its long way: the lock busy, a restart)
    never ran. Now the fenced gateway leaves it; the owner runs it."""
    config = default_config(sim.psu_port, sim.dmm_port)
    for ic in config.instruments:
        ic.socket_port = 0
    db = tmp_path / "bench.db"
    fenced: Gateway | None = Gateway(config, SqliteStore(db))
    assert fenced is not None
    await fenced.start()
    owner: Gateway | None = None
    try:
        run = fenced.create_run(script, "script")
        held = (await fenced.submit(run.id, "psu", "VOLT 2.5,(@1)")).request
        assert held is not None and held.status is Status.PENDING
        # A claim gone stale (its gateway paused): the next start takes the bench over.
        fenced.store.kv_put(TABLE, config.bench, {
            "instance": "paused", "host": "elsewhere", "pid": 1, "heartbeat": 0.0,
            "rules": {}})
        deadline = time.monotonic() + 10
        while fenced.core.registry.lost is None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert fenced.core.registry.lost is not None
        # Approved as the owner's grant records it when it cannot run it at once.
        req = fenced.get_request(held.id)
        req.approvals = [Approval(kind=ApprovalKind.SETPOINT, by="olga",
                                  proposal_hash=req.proposal_hash)]
        req.status = Status.APPROVED
        assert fenced.store.save_request(req, req.version, [Event(
            run_id=run.id, request_id=req.id, type=EventType.APPROVAL_GRANTED,
            data={"kind": "setpoint", "by": "olga", "proposal_hash": req.proposal_hash})])
        await asyncio.sleep(3 * SWEEP_SECONDS + 0.5)  # the fenced gateway's sweeps
        assert fenced.get_request(held.id).status is Status.APPROVED, \
            fenced.get_request(held.id).outcome
        await fenced.close()  # its operator restarts it (one read log per bench name):
        fenced.store.close()
        fenced = None
        owner = Gateway(config, SqliteStore(db))
        await owner.start()  # the bench's gateway now: its start runs what is approved
        done = owner.get_request(held.id)
        while done.status in (Status.APPROVED, Status.EXECUTING) and \
                time.monotonic() < deadline + 10:
            await asyncio.sleep(0.1)
            done = owner.get_request(held.id)
        assert done.status is Status.EXECUTED, (done.status, done.outcome)
        with own_port(sim.psu_resource_name, panel=True) as psu:
            assert float(psu.query("VOLT? (@1)")) == 2.5
    finally:
        for gw in (owner, fenced):
            if gw is not None:
                await gw.close()
                gw.store.close()


async def test_a_fenced_gateway_clears_no_stop_of_the_bench(
        sim: SimBenchThread, tmp_path: Path, olga: Principal) -> None:
    """The stops of a bench name are kept under that name in the store: the owner's and
    the fenced gateway's alike. An operator on the fenced one cleared the stop in force
    on the instrument the new owner serves."""
    config = default_config(sim.psu_port, sim.dmm_port)
    for ic in config.instruments:
        ic.socket_port = 0
    db = tmp_path / "bench.db"
    gw = Gateway(config, SqliteStore(db))
    await gw.start()
    try:
        await gw.emergency_stop(olga, "test", "psu")
        await _fenced(gw)
        with pytest.raises(Refused, match="no longer serves bench") as refused:
            gw.clear_stop(olga, "psu")
        assert refused.value.code == -203
        assert "psu" in gw.stopped()
    finally:
        await gw.close()
        gw.store.close()
    again = Gateway(config, SqliteStore(db))  # the bench's gateway, restarted
    await again.start()
    try:
        assert "psu" in again.stopped()
        run = again.create_run(Principal(name="bot2"), "script")
        result = await again.submit(run.id, "psu", "OUTP 1,(@1)")
        assert result.code == -203 and "psu is stopped" in result.reason, result
        with own_port(sim.psu_resource_name, panel=True) as psu:
            assert psu.query("OUTP? (@1)").strip() == "0"
    finally:
        await again.close()
        again.store.close()


async def test_a_fenced_gateway_runs_out_no_lease_of_the_bench(
        sim: SimBenchThread, tmp_path: Path) -> None:
    """A lease is renewed in the memory of the gateway its client talks to: the new
    owner's. The fenced gateway, sharing the bench name, found every lease of the bench
    unrenewed and ran it out: CH1, on for a client alive on the owner, switched off, and
    its plans ended. Now the leases are the owner's (it runs out the fenced one's too)."""
    config = default_config(sim.psu_port, sim.dmm_port)
    config.policy.lease_seconds = 1.5
    gw = Gateway(config, SqliteStore(tmp_path / "bench.db"))
    await gw.start()
    try:
        await _fenced(gw)
        with own_port(sim.psu_resource_name, panel=True) as psu:
            psu.write("VOLT 1,(@1)")
            psu.write("OUTP 1,(@1)")  # switched on by the owner, for its client
            assert psu.query("OUTP? (@1)").strip() == "1"
            gw.store.kv_put(LEASES, f"run-on-the-owner/{config.bench}/psu", {
                "run_id": "run-on-the-owner", "instrument": "psu",
                "bench": config.bench, "channels": [1]})
            await asyncio.sleep(1.5 + 6 * SWEEP_SECONDS)
            assert psu.query("OUTP? (@1)").strip() == "1"
        assert gw.store.kv_get(LEASES, f"run-on-the-owner/{config.bench}/psu") is not None
    finally:
        await gw.close()
        gw.store.close()


async def test_a_fenced_gateway_closes_no_run_of_the_bench(
        sim: SimBenchThread, tmp_path: Path, script: Principal) -> None:
    """A run's term is its keeper's, the bench name's gateway, which hears its client in
    memory: the new owner now. The fenced gateway, sharing the name, heard nothing and
    closed the run of a client alive on the owner, its requests cancelled."""
    config = default_config(sim.psu_port, sim.dmm_port)
    gw = Gateway(config, SqliteStore(tmp_path / "bench.db"))
    await gw.start()
    try:
        run = gw.create_run(script, "agent", heartbeat_seconds=2)
        held = (await gw.submit(run.id, "psu", "VOLT 2.5,(@1)")).request
        assert held is not None and held.status is Status.PENDING
        await _fenced(gw)  # its client heartbeats on the new owner from now on
        await asyncio.sleep(2 + 6 * SWEEP_SECONDS)
        assert gw.get_run(run.id).status is RunStatus.ACTIVE
        assert gw.get_request(held.id).status is Status.PENDING
    finally:
        await gw.close()
        gw.store.close()


async def test_a_fenced_gateway_lets_go_of_the_instrument_locks(
        sim: SimBenchThread, tmp_path: Path, script: Principal) -> None:
    """The lock goes with the connection that took it: a fenced gateway kept its psu and
    meter locked, so the new owner could neither lock them nor write. Now it closes them,
    and a read it still answers never takes a lock again."""
    gw = Gateway(default_config(sim.psu_port, sim.dmm_port),
                 SqliteStore(tmp_path / "bench.db"))
    await gw.start()
    try:
        with own_port(sim.psu_resource_name) as psu:
            assert psu.query("SYST:LOCK:REQ?").strip() == "0", "the gateway holds it"
        await _fenced(gw)
        run = gw.create_run(script, "script")
        deadline = time.monotonic() + 10
        with own_port(sim.psu_resource_name) as psu:
            while psu.query("SYST:LOCK:REQ?").strip() != "1" and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert psu.query("SYST:LOCK:OWN?").strip('"').startswith("LAN")
            read = await gw.submit(run.id, "psu", "MEAS:VOLT? (@1)")  # still answered
            assert read.code == 0, read
            psu.write("VOLT 1.5,(@1)")  # the new owner's connection, not a panel
            assert psu.query("SYST:ERR?").startswith("+0"), "locked again by the fenced one"
            assert float(psu.query("VOLT? (@1)")) == 1.5
            psu.write("SYST:LOCK:REL")
    finally:
        await gw.close()
        gw.store.close()
