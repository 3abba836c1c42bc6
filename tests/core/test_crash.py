"""Crash and restart.

In process: what a restart finds in the store is reconciled from a read-back, never
re-sent. For real: ``bench-gate serve`` (a subprocess, against a separately running
``python -m sim_instruments serve``) is SIGKILLed at random points with requests in every
status and a write in flight, and restarted on the same store; ``bench/crash.py`` runs the
same rounds (``--rounds 50``) and prints the counts.
"""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import threading
from contextlib import closing
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench_gate.config import BenchConfig
from bench_gate.errors import InstrumentError
from bench_gate.federation import TABLE
from bench_gate.gateway import Gateway
from bench_gate.instruments import Link, PyvisaLink
from bench_gate.models import Approval, ApprovalKind, EventType, Principal, Status
from bench_gate.states import Event as Move
from bench_gate.states import target
from bench_gate.store import SqliteStore
from tests.conftest import Clock
from tests.faults import OTHER_IDN, FaultLink


def _force_executing(gw: Gateway, request_id: str) -> None:
    """Leave a request where a crash in the middle of its write leaves it."""
    req = gw.store.get_request(request_id)
    assert req is not None
    for kind in req.missing():
        req.approvals.append(Approval(kind=kind, by="olga", proposal_hash=req.proposal_hash))
    version = req.version
    req.status = Status.EXECUTING
    assert gw.store.save_request(req, version, [])


async def test_interrupted_unverifiable_write_is_ambiguous(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        front_panel: Any) -> None:
    """A ``*RST`` cut off by a crash may or may not have run, and a read-back of a bench at
    its defaults cannot tell: a person decides, the gateway never says "failed"."""
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    run = gw.create_run(script, "script")
    req = (await gw.submit(run.id, "psu", "*RST")).request
    assert req is not None
    _force_executing(gw, req.id)
    await gw.close()
    gw.store.close()

    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        after = gw.get_request(req.id)
        assert after.status is Status.AMBIGUOUS, after.outcome
        assert "cannot be confirmed by a read-back" in (after.outcome or "")
        assert front_panel.query("*IDN?"), "still reachable; nothing was re-sent"
    finally:
        await gw.close()
        gw.store.close()


async def test_interrupted_write_read_back_from_another_instrument_is_ambiguous(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        front_panel: Any) -> None:
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    run = gw.create_run(script, "script")
    req = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
    assert req is not None
    _force_executing(gw, req.id)
    await gw.close()
    gw.store.close()

    psu = config.instrument("psu")
    assert psu is not None
    link = FaultLink(PyvisaLink(psu), "psu")
    link.impersonate()  # another instrument took the address while the gateway was down
    gw = Gateway(config, SqliteStore(db_path), links={"psu": link}, clock=clock)
    await gw.start()
    try:
        after = gw.get_request(req.id)
        assert after.status is Status.AMBIGUOUS, after.outcome
        assert OTHER_IDN in (after.outcome or "")
        assert not any(c.startswith("VOLT 2") for c in link.calls), "never re-sent"
    finally:
        await gw.close()
        gw.store.close()


def test_sigkill_at_random_points_then_restart(tmp_path: Path) -> None:
    """The short version of ``python bench/crash.py --rounds 50``: a real ``bench-gate
    serve`` SIGKILLed five times at random moments, restarted on the same store."""
    from bench.crash import run_rounds

    tally = run_rounds(5, seed=20, workdir=tmp_path)
    assert tally.violations == [], tally.report()
    assert tally.rounds == 5 and sum(tally.checks.values()) > 100
    assert tally.at_kill["pending"] >= 10, tally.report()  # A and B, every round


def test_a_write_still_inside_the_instrument_is_judged_after_it_lands(tmp_path: Path) -> None:
    """The instrument holds each write 8 s. The gateway is SIGKILLed 0.5 s into a write and
    restarted at once. The restart waits for the instrument to settle (``*OPC?``) before it
    reads back, so the write that landed late is ``executed``, never "failed"; and a request
    approved behind it is rechecked against the state read after that, so it goes stale."""
    import threading
    import time

    from bench.crash import Bench

    bench = Bench(tmp_path, seed=5, write_delay=8.0, hangup_drop=0.0)
    try:
        bench.start()
        with bench.client("script-7") as me, bench.client("olga") as olga:
            run = me.post("/v1/runs", json={"kind": "script"}).json()["id"]
            first = me.post(f"/v1/runs/{run}/scpi", json={
                "instrument": "psu", "command": "VOLT 2.5,(@1)"}).json()["takeover"]
            # Another run: a run's own later request would be judged against the state its
            # earlier one leaves, and rightly run after it (tests/core/test_natural_order.py).
            other = me.post("/v1/runs", json={"kind": "script"}).json()["id"]
            second = me.post(f"/v1/runs/{other}/scpi", json={
                "instrument": "psu", "command": "VOLT 3,(@1)"}).json()["takeover"]
            grant = "/v1/runs/{}/takeover/{}/grant"

            def decide(tk: dict[str, Any]) -> None:
                try:
                    olga.post(grant.format(tk["runId"], tk["id"]),
                              json={"approve": ["setpoint"], "proposalHash": tk["proposalHash"]})
                except Exception:  # the gateway died under it
                    pass

            threads = [threading.Thread(target=decide, args=(tk,)) for tk in (first, second)]
            for t in threads:
                t.start()
                time.sleep(0.2)
            time.sleep(0.3)
            bench.kill()
            for t in threads:
                t.join()
            bench.start()
            done = olga.get(f"/v1/takeover/{first['id']}").json()
            assert done["status"] == "executed", done["outcome"]
            behind = olga.get(f"/v1/takeover/{second['id']}").json()
            for _ in range(100):
                if behind["status"] not in ("approved", "executing"):
                    break
                time.sleep(0.1)
                behind = olga.get(f"/v1/takeover/{second['id']}").json()
            assert behind["status"] == "stale", behind["outcome"]
        with socket.create_connection(("127.0.0.1", bench.psu_port), timeout=10) as panel:
            panel.sendall(b"VOLT? (@1)\n")
            assert Decimal(panel.recv(100).decode().strip()) == Decimal("2.5")
    finally:
        bench.close()


async def _until(gw: Gateway, request_id: str, status: Status) -> None:
    """Wait (up to 10 s) until the store has ``request_id`` in ``status``."""
    for _ in range(1000):
        if gw.get_request(request_id).status is status:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{request_id} never became {status.value}")


class _HeldRecheck:
    """The supply's link: once armed, a query waits where the gateway is caught (after
    the grant's commit, in the live recheck) and then fails, as a dead process would."""

    def __init__(self, inner: Link) -> None:
        self.inner = inner
        self.writes: list[str] = []
        self.armed = False
        self.dies = True  # a held query then fails; else it is answered
        self.reached = threading.Event()
        self.go = threading.Event()

    def __getattr__(self, name: str) -> Any:  # opens, connected, ... as the link has them
        return getattr(self.inner, name)

    def write(self, command: str) -> None:
        self.writes.append(command)
        self.inner.write(command)

    def query(self, command: str, *args: Any) -> str:
        if self.armed:
            self.reached.set()
            self.go.wait(10)
            if self.dies:
                raise InstrumentError("the gateway died here")
        return self.inner.query(command, *args)

    def close(self) -> None:
        self.inner.close()


async def test_a_crash_between_the_grant_and_its_write_never_writes(
        config: BenchConfig, db_path: Path, tmp_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    """The last approval and the start are one commit (executor.run_granted), before the
    live recheck. The store as a crash leaves it there (every committed transaction: a
    backup taken while the recheck is held) has the request ``executing`` with its
    approval; the restart judges it from a read-back, "nothing took effect", and never
    sends the write; the supply's voltage, read on its own port, never moved."""
    # pending -approve-> approved -start-> executing, and a changed recheck from there
    assert target(Status.PENDING, Move.APPROVE) is Status.APPROVED
    assert target(Status.APPROVED, Move.START) is Status.EXECUTING
    assert target(Status.EXECUTING, Move.GO_STALE) is Status.STALE
    psu = config.instrument("psu")
    assert psu is not None
    before = Decimal(front_panel.query("VOLT? (@1)"))
    link = _HeldRecheck(PyvisaLink(psu))
    crashed = tmp_path / "crashed.db"
    gw = Gateway(config, SqliteStore(db_path), links={"psu": link}, clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        req = (await gw.submit(run.id, "psu", "VOLT 2.5,(@1)")).request
        assert req is not None and req.status is Status.PENDING
        link.armed = True
        grant = asyncio.create_task(gw.grant(req.id, olga, ["setpoint"],
                                             proposal_hash=req.proposal_hash))
        assert await asyncio.to_thread(link.reached.wait, 10), "the recheck never started"
        await _until(gw, req.id, Status.EXECUTING)  # the commit overlaps the recheck's reads
        with closing(sqlite3.connect(db_path)) as src, closing(sqlite3.connect(crashed)) as dst:
            src.backup(dst)  # what a SIGKILL now would leave
        link.go.set()
        await asyncio.wait_for(grant, 10)
    finally:
        link.go.set()
        await gw.close()
        gw.store.close()

    left = SqliteStore(crashed)
    try:
        at_crash = left.get_request(req.id)
        assert at_crash is not None and at_crash.status is Status.EXECUTING
        assert at_crash.approved_kinds() == {ApprovalKind.SETPOINT}
        kinds = [e.type for e in left.journal(run.id, limit=1000) if e.request_id == req.id]
        assert kinds[-2:] == [EventType.APPROVAL_GRANTED, EventType.STEP_STARTED], kinds
        # The dead gateway's bench claim (its pid is this test's, so it would look alive).
        left.kv_delete(TABLE, config.bench)
    finally:
        left.close()

    again = _HeldRecheck(PyvisaLink(psu))
    gw = Gateway(config, SqliteStore(crashed), links={"psu": again}, clock=clock)
    await gw.start()
    try:
        after = gw.get_request(req.id)
        assert after.status is Status.FAILED, after.outcome
        assert "nothing took effect" in (after.outcome or "")
        assert not any(c.startswith("VOLT") for c in again.writes + link.writes), \
            "the write was never sent, before the crash or after it"
        assert Decimal(front_panel.query("VOLT? (@1)")) == before
    finally:
        await gw.close()
        gw.store.close()


class _SlowCommit(SqliteStore):
    """A store whose next save of an ``executing`` request waits first, as on a slow disk
    (run_granted commits on a worker thread, so the wait holds no event loop)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.hold = False
        self.reached = threading.Event()
        self.go = threading.Event()

    def save_request(self, req: Any, expected_version: int, events: Any) -> bool:
        if self.hold and req.status is Status.EXECUTING:
            self.hold = False
            self.reached.set()
            self.go.wait(10)
        return super().save_request(req, expected_version, events)


async def test_the_write_waits_for_the_grants_commit(
        config: BenchConfig, db_path: Path, tmp_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    """The grant's commit (the approval and the start) runs while the lane re-reads the
    live state, and the write waits for it (executor.run_granted). With the commit held
    (a slow disk), the recheck has read the supply and nothing is written; the store as a
    crash then leaves it has the request pending without the approval, and the restart
    writes nothing. Once the commit is durable, the write goes."""
    psu = config.instrument("psu")
    assert psu is not None
    link = FaultLink(PyvisaLink(psu), "psu")
    store = _SlowCommit(db_path)
    crashed = tmp_path / "crashed.db"
    gw = Gateway(config, store, links={"psu": link}, clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        req = (await gw.submit(run.id, "psu", "VOLT 2.5,(@1)")).request
        assert req is not None and req.status is Status.PENDING
        link.calls.clear()
        store.hold = True
        grant = asyncio.create_task(gw.grant(req.id, olga, ["setpoint"],
                                             proposal_hash=req.proposal_hash))
        assert await asyncio.to_thread(store.reached.wait, 10), "the commit never started"
        for _ in range(500):  # the recheck reads while the commit waits
            if any(c.endswith("*IDN?") for c in link.calls):
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        assert any(c.endswith("*IDN?") for c in link.calls), link.calls
        assert not any(c.startswith("VOLT 2.5") for c in link.calls), "written before commit"
        with closing(sqlite3.connect(db_path)) as src, closing(sqlite3.connect(crashed)) as dst:
            src.backup(dst)  # what a SIGKILL now would leave
        store.go.set()
        done = (await asyncio.wait_for(grant, 10)).request
        assert done.status is Status.EXECUTED, done.outcome
        assert Decimal(front_panel.query("VOLT? (@1)")) == Decimal("2.5")
    finally:
        store.go.set()
        await gw.close()
        store.close()

    left = SqliteStore(crashed)
    try:
        at_crash = left.get_request(req.id)
        assert at_crash is not None and at_crash.status is Status.PENDING
        assert at_crash.approvals == []
        left.kv_delete(TABLE, config.bench)  # the dead gateway's bench claim
    finally:
        left.close()
    again = FaultLink(PyvisaLink(psu), "psu")
    gw = Gateway(config, SqliteStore(crashed), links={"psu": again}, clock=clock)
    await gw.start()
    try:
        assert gw.get_request(req.id).status is Status.PENDING
        assert not any(c.startswith("VOLT 2.5") for c in again.calls), "nothing re-sent"
    finally:
        await gw.close()
        gw.store.close()


async def test_an_emergency_stop_during_the_recheck_stops_the_write(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal, olga: Principal,
        front_panel: Any) -> None:
    """The request is ``executing`` from its grant's commit on, so the stop's stand-down
    (which cancels what is pending or approved) does not reach it: the write itself asks
    for a stop first, on its lane turn, and sends nothing. The supply's voltage, read on
    its own port, never moved."""
    psu = config.instrument("psu")
    assert psu is not None
    before = Decimal(front_panel.query("VOLT? (@1)"))
    link = _HeldRecheck(PyvisaLink(psu))
    link.dies = False
    gw = Gateway(config, SqliteStore(db_path), links={"psu": link}, clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        req = (await gw.submit(run.id, "psu", "VOLT 2.5,(@1)")).request
        assert req is not None
        link.armed = True
        grant = asyncio.create_task(gw.grant(req.id, olga, ["setpoint"],
                                             proposal_hash=req.proposal_hash))
        assert await asyncio.to_thread(link.reached.wait, 10), "the recheck never started"
        await _until(gw, req.id, Status.EXECUTING)
        stop = asyncio.create_task(gw.emergency_stop(olga, "test", "psu"))
        await asyncio.sleep(0.2)  # the stop is recorded and its safe action waits its turn
        link.armed = False
        link.go.set()
        await asyncio.wait_for(stop, 10)
        done = (await asyncio.wait_for(grant, 10)).request
        assert done.status is Status.FAILED, done.outcome
        assert "stopped" in (done.outcome or ""), done.outcome
        assert not any(c.startswith("VOLT") for c in link.writes), link.writes
        assert Decimal(front_panel.query("VOLT? (@1)")) == before
    finally:
        link.go.set()
        await gw.close()
        gw.store.close()


def test_a_read_answered_before_a_sigkill_and_not_yet_folded_is_in_the_journal(
        tmp_path: Path) -> None:
    """A real ``bench-gate serve`` that folds its read log only after a minute answers
    three reads and is SIGKILLed: the answers left, the store holds none of the reads, the
    read log holds all three (and, as if the kill had cut a fourth in the middle of its
    write, a torn last record). The restart folds the three, in their order, before
    anything else it journals; the fourth, whose answer never left, is dropped; ``bench-gate
    journal verify`` finds the chain intact."""
    import json
    import subprocess
    import sys

    from bench.crash import Bench

    bench = Bench(tmp_path, seed=9, write_delay=0.0, hangup_drop=0.0)
    with bench.config.open("a") as toml:
        toml.write("[journal]\nfold_seconds = 60\n")
    try:
        bench.start()
        with bench.client("script-7") as me:
            run = me.post("/v1/runs", json={"kind": "script"}).json()["id"]
            answers = [me.post(f"/v1/runs/{run}/scpi", json={
                "instrument": "psu", "command": command}).json()
                for command in ("VOLT? (@1)", "CURR? (@1)", "VOLT? (@2)")]
        assert [a["status"] for a in answers] == ["executed"] * 3, answers
        before = bench.journal()
        assert [t for _, _, t, d in before if t == "read_executed"] == [], \
            "not folded yet: the reads are only in the read log"
        (log,) = tmp_path.glob("bench.db.reads-*")
        records = log.read_bytes().split(b"\n")[1:-1]
        assert len(records) == 3
        bench.kill()
        with log.open("ab") as f:  # a fourth record, cut in the middle of its write
            f.write(records[-1].replace(b"[3,", b"[4,")[:40])

        bench.start()
        after = bench.journal()
        reads = [(seq, d) for seq, _, t, d in after if t == "read_executed"]
        assert [d["message"] for _, d in reads] == ["VOLT? (@1)", "CURR? (@1)", "VOLT? (@2)"]
        assert [d["response"] for _, d in reads] == [a["response"] for a in answers]
        last_before = max(seq for seq, *_ in before)
        folded = {seq for seq, _ in reads} | {seq - 1 for seq, _ in reads}  # with received
        restarted = [seq for seq, *_ in after if seq > last_before and seq not in folded]
        assert min(folded) == last_before + 1 and restarted, "the restart's own events"
        assert min(restarted) > max(folded), \
            "the crash's reads are folded before the restart journals anything"
        assert len(log.read_bytes().split(b"\n")) == 2, "cut to its header, torn tail gone"
        done = subprocess.run([sys.executable, "-m", "bench_gate.cli", "journal", "verify",
                               "--db", str(bench.db)], capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0 and "intact" in done.stdout, done.stdout + done.stderr
        with bench.client("script-7") as me:
            page = me.get(f"/v1/runs/{run}/journal", params={"limit": 100}).json()
        seen = [(e["type"], e["data"].get("message")) for e in page["events"]]
        assert seen == [("run_created", None),
                        *[(t, m) for m in ("VOLT? (@1)", "CURR? (@1)", "VOLT? (@2)")
                          for t in ("command_received", "read_executed")]], json.dumps(seen)
    finally:
        bench.close()
