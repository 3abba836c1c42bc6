"""Crash points of the corridor the random kills of test_crash.py rarely hit, each one
taken exactly: the store as a SIGKILL at that point leaves it (every committed
transaction: a backup taken while the gateway is held there), a restart on that store,
and the instrument's real state read on the simulator's own port."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from bench_gate.config import BenchConfig
from bench_gate.errors import InstrumentError
from bench_gate.federation import TABLE
from bench_gate.gateway import Gateway
from bench_gate.instruments import Link, PyvisaLink
from bench_gate.leases import LEASES
from bench_gate.models import EventType, Principal, Status
from bench_gate.store import SqliteStore
from tests.conftest import Clock


class _Held:
    """The supply's link: once armed, the first write that starts with ``prefix`` waits
    there (the gateway caught at that point) and then fails, as a dead process would."""

    def __init__(self, inner: Link, prefix: str) -> None:
        self.inner = inner
        self.prefix = prefix
        self.writes: list[str] = []
        self.armed = False
        self.reached = threading.Event()
        self.go = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def write(self, command: str) -> None:
        if self.armed and command.startswith(self.prefix):
            self.armed = False
            self.reached.set()
            self.go.wait(10)
            raise InstrumentError("the gateway died here")
        self.writes.append(command)
        self.inner.write(command)

    def query(self, command: str, *args: Any) -> str:
        return self.inner.query(command, *args)

    def close(self) -> None:
        self.inner.close()


def _crashed_copy(db_path: Path, crashed: Path) -> None:
    with closing(sqlite3.connect(db_path)) as src, closing(sqlite3.connect(crashed)) as dst:
        src.backup(dst)  # what a SIGKILL now would leave


def _forget_claim(path: Path, bench: str) -> None:
    """The dead gateway's bench claim (its pid is this test's, so it would look alive)."""
    left = SqliteStore(path)
    try:
        left.kv_delete(TABLE, bench)
    finally:
        left.close()


async def test_an_emergency_stop_cut_off_by_a_crash_is_finished_by_the_restart(
        config: BenchConfig, db_path: Path, tmp_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    """The stop is recorded first (so nothing new gets through), then its safe action
    runs, then what waited is cancelled and the stop journaled. A crash after the record
    and before the safe action reached the supply left the store saying "stopped" with
    CH1 still on at the panel's 3 V, no emergency_stop in the journal and a write still
    pending. The restart finishes the stop: CH1 off on the simulator's own port, the
    pending write cancelled, the stop journaled (once)."""
    psu = config.instrument("psu")
    assert psu is not None
    front_panel.write("VOLT 3,(@1)")
    front_panel.write("OUTP ON,(@1)")
    assert front_panel.query("OUTP? (@1)").strip() == "1"
    link = _Held(PyvisaLink(psu), "OUTP:DEL:FALL")
    crashed = tmp_path / "crashed.db"
    gw = Gateway(config, SqliteStore(db_path), links={"psu": link}, clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        req = (await gw.submit(run.id, "psu", "VOLT 2,(@2)")).request
        assert req is not None and req.status is Status.PENDING
        link.armed = True
        stop = asyncio.create_task(gw.emergency_stop(olga, "test", "psu"))
        assert await asyncio.to_thread(link.reached.wait, 10), "the safe action never ran"
        # The store keeps the stop on a worker thread while the safe action runs: the
        # crash comes once it is kept and before the safe action reached the supply.
        deadline = time.monotonic() + 10
        while not any(k.endswith("/psu") for k, _ in gw.store.kv_items("stops")) and \
                time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        _crashed_copy(db_path, crashed)
        link.go.set()
        await asyncio.wait_for(stop, 10)
    finally:
        link.go.set()
        await gw.close()
        gw.store.close()
    # The crashed world: the safe action never reached the supply.
    front_panel.write("VOLT 3,(@1)")
    front_panel.write("OUTP ON,(@1)")
    assert front_panel.query("OUTP? (@1)").strip() == "1"
    _forget_claim(crashed, config.bench)
    left = SqliteStore(crashed)
    try:
        assert any(k.endswith("/psu") for k, _ in left.kv_items("stops")), "recorded first"
        assert left.get_request(req.id).status is Status.PENDING  # type: ignore[union-attr]
    finally:
        left.close()

    gw = Gateway(config, SqliteStore(crashed), clock=clock)
    await gw.start()
    try:
        assert front_panel.query("OUTP? (@1)").strip() == "0", "the stop's safe action ran"
        after = gw.get_request(req.id)
        assert after.status is Status.CANCELLED, after.outcome
        stops = [e for e in gw.store.journal(f"bench:{config.bench}", limit=100)
                 if e.type is EventType.EMERGENCY_STOP]
        assert len(stops) == 1, stops
        assert "psu" in gw.stopped()
    finally:
        await gw.close()
        gw.store.close()
    gw = Gateway(config, SqliteStore(crashed), clock=clock)  # and only once
    await gw.start()
    try:
        stops = [e for e in gw.store.journal(f"bench:{config.bench}", limit=100)
                 if e.type is EventType.EMERGENCY_STOP]
        assert len(stops) == 1, stops
    finally:
        await gw.close()
        gw.store.close()


class _CrashBeforeLease(SqliteStore):
    """A store that, armed, copies itself as a SIGKILL would leave it just before the
    lease on an output the write switched on is recorded."""

    def __init__(self, path: Path, crashed: Path) -> None:
        super().__init__(path)
        self.file = path
        self.crashed = crashed
        self.armed = False

    def kv_put(self, table: str, key: str, data: dict[str, Any]) -> None:
        if self.armed and table == LEASES:
            self.armed = False
            _crashed_copy(self.file, self.crashed)
        super().kv_put(table, key, data)


async def test_an_output_switched_on_just_before_a_crash_is_still_leased(
        config: BenchConfig, db_path: Path, tmp_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    """An executed write that switched CH1 on is concluded (executed, its receipt) and its
    channel leased, so a lost client never leaves it on. A crash between the two left the
    request executed and CH1 on with no lease: its HTTP client gone with the crash, CH1
    stayed on after the restart for good. The lease is recorded before the outcome, so the
    restart's lease runs out and switches CH1 off (the simulator's own port)."""
    config.policy.lease_seconds = 600  # not before the crash
    config.policy.on_client_lost = "safe"
    crashed = tmp_path / "crashed.db"
    store = _CrashBeforeLease(db_path, crashed)
    gw = Gateway(config, store, clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        req = (await gw.submit(run.id, "psu", "VOLT 1,(@1);:OUTP ON,(@1)")).request
        assert req is not None
        store.armed = True
        done = (await gw.grant(req.id, olga, ["setpoint", "output_enable"],
                               proposal_hash=req.proposal_hash)).request
        assert done.status is Status.EXECUTED, done.outcome
        assert not store.armed, "the lease was recorded"
    finally:
        await gw.close()
        store.close()
    assert front_panel.query("OUTP? (@1)").strip() == "1"
    _forget_claim(crashed, config.bench)

    config.policy.lease_seconds = 1.5
    gw = Gateway(config, SqliteStore(crashed), clock=clock)
    await gw.start()
    try:
        after = gw.get_request(req.id)
        assert after.status is Status.EXECUTED, after.outcome  # never run again
        for _ in range(100):  # the lease runs out (1.5 s) and the sweep makes CH1 safe
            if front_panel.query("OUTP? (@1)").strip() == "0":
                break
            await asyncio.sleep(0.1)
        assert front_panel.query("OUTP? (@1)").strip() == "0", "CH1 left on for nobody"
    finally:
        await gw.close()
        gw.store.close()


def _forge_approval(path: Path, request_id: str, model_id: str, *, status: str) -> None:
    """Edit a request row while the gateway is stopped, as someone with the file would:
    the approval another request was given, re-bound to this one's proposal hash."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        data = json.loads(con.execute("SELECT data FROM requests WHERE id = ?",
                                      (request_id,)).fetchone()[0])
        model = json.loads(con.execute("SELECT data FROM requests WHERE id = ?",
                                       (model_id,)).fetchone()[0])
        approval = dict(model["approvals"][0], proposal_hash=data["proposal_hash"])
        data.update(approvals=[approval], status=status)
        con.execute("UPDATE requests SET status = ?, data = ? WHERE id = ?",
                    (status, json.dumps(data), request_id))
    finally:
        con.close()


async def test_an_approval_written_into_the_store_behind_the_gateways_back_runs_nothing(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    """``journal verify`` walks the journal's chain, not the requests table: with the
    gateway stopped, one UPDATE of a pending request's row (status approved, an approval
    copied from another request and re-bound to its proposal hash) left the chain intact,
    and the restart executed the write (the supply read 2.5 V), with no approval in the
    journal. An approval now counts only if its journaled event is there (and its row
    intact): the restart fails it, nothing written; the same for a forged first approval
    that a real second one would have completed, and for a real first approval whose
    journal row was edited in place (which verify does see)."""
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        forged = (await gw.submit(run.id, "psu", "VOLT 2.5,(@1)")).request
        both = (await gw.submit(run.id, "psu",
                                "VOLT 1.5,(@2);:CURR 0.2,(@2);:OUTP ON,(@2)")).request
        model = (await gw.submit(run.id, "psu", "VOLT 0.5,(@3)")).request
        edited = (await gw.submit(run.id, "psu",
                                  "VOLT 2,(@1);:CURR 0.2,(@1);:OUTP ON,(@1)")).request
        assert forged and both and model and edited
        assert (await gw.grant(model.id, olga, ["setpoint"], proposal_hash=model.proposal_hash)
                ).request.status is Status.EXECUTED
        assert (await gw.grant(edited.id, olga, ["setpoint"], proposal_hash=edited.proposal_hash)
                ).request.status is Status.PENDING
    finally:
        await gw.close()
        gw.store.close()
    _forget_claim(db_path, config.bench)
    _forge_approval(db_path, forged.id, model.id, status="approved")
    _forge_approval(db_path, both.id, model.id, status="pending")  # its setpoint, forged
    con = sqlite3.connect(db_path, isolation_level=None)
    try:  # a real approval's journal row edited in place (its notes): it proves nothing now
        con.execute("UPDATE journal SET data = json_set(data, '$.notes', 'edited') "
                    "WHERE request_id = ? AND type = 'approval_granted'", (edited.id,))
    finally:
        con.close()
    verify = subprocess.run([sys.executable, "-m", "bench_gate.cli", "journal", "verify",
                             "--db", str(db_path)], capture_output=True, text=True,
                            timeout=60, check=False)
    assert verify.returncode != 0 and "was edited" in verify.stdout, verify.stdout
    # the journal's edit is seen by verify; the requests table's are not: the gateway must

    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        after = gw.get_request(forged.id)
        for _ in range(100):
            if after.status is not Status.APPROVED:
                break
            await asyncio.sleep(0.05)
            after = gw.get_request(forged.id)
        assert after.status is Status.FAILED, after.outcome
        assert "not in the journal" in (after.outcome or ""), after.outcome
        pending = gw.get_request(both.id)
        assert pending.status is Status.PENDING
        done = (await gw.grant(both.id, olga, ["output_enable"],
                               proposal_hash=pending.proposal_hash)).request
        assert done.status is Status.FAILED, done.outcome
        assert "not in the journal" in (done.outcome or ""), done.outcome
        rest = (await gw.grant(edited.id, olga, ["output_enable"],
                               proposal_hash=edited.proposal_hash)).request
        assert rest.status is Status.FAILED, rest.outcome
        assert "not in the journal" in (rest.outcome or ""), rest.outcome
    finally:
        await gw.close()
        gw.store.close()
    assert float(front_panel.query("VOLT? (@1)")) == 0.0, "never written"
    assert front_panel.query("OUTP? (@1)").strip() == "0"
    assert float(front_panel.query("VOLT? (@2)")) == 0.0
    assert front_panel.query("OUTP? (@2)").strip() == "0"


class _CrashAfterLeaseDropped(SqliteStore):
    """A store that, armed, copies itself as a SIGKILL would leave it right after a lease
    that ran out is deleted."""

    def __init__(self, path: Path, crashed: Path) -> None:
        super().__init__(path)
        self.file = path
        self.crashed = crashed
        self.armed = False

    def kv_delete(self, table: str, key: str) -> None:
        super().kv_delete(table, key)
        if self.armed and table == LEASES:
            self.armed = False
            _crashed_copy(self.file, self.crashed)


async def test_a_lost_clients_safe_action_is_journaled_before_its_lease_goes(
        config: BenchConfig, db_path: Path, tmp_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    """A lease that runs out switches its outputs off, deletes the lease, then journals
    ``lease_expired``: a crash between the last two left CH1 switched off by the gateway
    with no word of it in the journal, and no lease left to say it again. The event is
    journaled first: the store as the crash leaves it holds it."""
    config.policy.lease_seconds = 1.0
    config.policy.on_client_lost = "safe"
    crashed = tmp_path / "crashed.db"
    store = _CrashAfterLeaseDropped(db_path, crashed)
    gw = Gateway(config, store, clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        req = (await gw.submit(run.id, "psu", "VOLT 1,(@1);:OUTP ON,(@1)")).request
        assert req is not None
        store.armed = True
        done = (await gw.grant(req.id, olga, ["setpoint", "output_enable"],
                               proposal_hash=req.proposal_hash)).request
        assert done.status is Status.EXECUTED, done.outcome
        for _ in range(100):
            if not store.armed:
                break
            await asyncio.sleep(0.1)
        assert not store.armed, "the lease never ran out"
    finally:
        await gw.close()
        store.close()
    assert front_panel.query("OUTP? (@1)").strip() == "0"
    left = SqliteStore(crashed)
    try:
        kinds = [e.type for e in left.journal(run.id, limit=1000)]
        assert EventType.LEASE_EXPIRED in kinds, kinds
    finally:
        left.close()


class _CrashAtActivation(SqliteStore):
    """A store that, armed, copies itself as a SIGKILL would leave it right after a plan
    is saved active (its request ``executing``, not yet ``executed``)."""

    def __init__(self, path: Path, crashed: Path) -> None:
        super().__init__(path)
        self.file = path
        self.crashed = crashed
        self.armed = False

    def kv_put(self, table: str, key: str, data: dict[str, Any]) -> None:
        super().kv_put(table, key, data)
        if self.armed and table == "plans" and data.get("status") == "active":
            self.armed = False
            _crashed_copy(self.file, self.crashed)


async def test_a_plan_whose_activation_a_crash_cut_off_runs_nothing_unattended(
        config: BenchConfig, db_path: Path, tmp_path: Path, clock: Clock, script: Principal,
        olga: Principal, pete: Principal, front_panel: Any) -> None:
    """A plan's activation saves the plan active, journals plan_activated, then finishes
    its request. A crash in between leaves the plan active and its request ``executing``:
    the restart judges the request from a read-back (a plan cannot be confirmed by one:
    ambiguous), which ends the plan, so the script's next write inside it is held for a
    person and nothing runs unattended (0 V on the simulator's own port). Found holding;
    kept as a regression test."""
    crashed = tmp_path / "crashed.db"
    store = _CrashAtActivation(db_path, crashed)
    gw = Gateway(config, store, clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        req = await gw.request_plan(run.id, {
            "instrument": "psu", "channels": [1], "voltage": [0, 5], "current_max": 0.5,
            "max_step": 5, "output_enable": False, "max_writes": 40, "timeout_minutes": 30},
            rationale="IV sweep of CH1")
        store.armed = True
        done = await gw.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
        assert done.request.status is Status.EXECUTED, done.request.outcome
        assert not store.armed, "the plan was saved active"
    finally:
        await gw.close()
        store.close()
    _forget_claim(crashed, config.bench)

    gw = Gateway(config, SqliteStore(crashed), clock=clock)
    await gw.start()
    try:
        step = await gw.submit(run.id, "psu", "VOLT 1,(@1)")
        assert step.status == "pending", step
        assert [p.status.value for p in gw.list_plans(run.id)] == ["denied"]
        after = gw.get_request(req.id)
        assert after.status is Status.AMBIGUOUS, after.outcome
    finally:
        await gw.close()
        gw.store.close()
    assert float(front_panel.query("VOLT? (@1)")) == 0.0
