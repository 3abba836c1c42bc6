"""Heartbeat terms (bench_gate/terms.py): a run whose client went silent closes, so its
requests never run for nobody, even when nothing told the gateway the client went (a
``bench-gate mcp`` or an HTTP agent SIGKILLed, out of memory, a laptop lid shut).

Each test proves the instrument's state on the simulator's own port (``front_panel``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bench_gate.config import BenchConfig
from bench_gate.errors import InvalidInput, PermissionDenied, TransitionError
from bench_gate.gateway import Gateway
from bench_gate.instruments import PyvisaLink
from bench_gate.models import EventType, Principal, Role, RunStatus, Status
from bench_gate.store import SqliteStore
from bench_gate.terms import MAX_TERM, MIN_TERM
from tests.conftest import Clock
from tests.core.test_leases import until
from tests.core.test_review_holes_6 import SlowAfterWrite

TERM = 2


def volts(front_panel: Any, ch: int = 1) -> Decimal:
    return Decimal(front_panel.query(f"VOLT? (@{ch})"))


async def test_a_silent_clients_run_closes_and_its_write_never_runs(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    """Before, a run nobody heard from stayed open until its requests expired (10 min by
    default): a person could approve one and it ran for nobody."""
    run = gateway.create_run(script, "agent", "bring CH1 up", heartbeat_seconds=TERM)
    held = (await gateway.submit(run.id, "psu", "VOLT 4,(@1)")).request
    assert held is not None and held.status is Status.PENDING
    async with gateway.subscribe() as events:
        took = await until(lambda: gateway.get_request(held.id).status is Status.CANCELLED,
                           TERM + 1.0)
        alerts = []
        while not events.empty():
            alerts.append(events.get_nowait())
    assert took >= TERM - 0.2, "closed before its term ran out"
    req = gateway.get_request(held.id)
    assert req.outcome == (f"cancelled: client gone: no heartbeat for {TERM} s; "
                           "nothing was written")
    closed = gateway.get_run(run.id)
    assert closed.status is RunStatus.CLOSED
    assert closed.closed_reason == f"client gone: no heartbeat for {TERM} s"
    kinds = [(e.type, e.data.get("reason")) for e in gateway.journal(run.id, limit=500)]
    assert (EventType.RUN_CLOSED, f"client gone: no heartbeat for {TERM} s") in kinds
    assert any(a.get("alert") == "client_gone" and a.get("run_id") == run.id
               for a in alerts), alerts
    with pytest.raises(TransitionError):
        await gateway.grant(held.id, olga, ["setpoint"], proposal_hash=held.proposal_hash)
    assert volts(front_panel) == 0


async def test_submits_and_heartbeats_keep_a_run_open_for_many_terms(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    run = gateway.create_run(script, "agent", heartbeat_seconds=TERM)
    held = (await gateway.submit(run.id, "psu", "VOLT 3,(@1)")).request
    assert held is not None
    for i in range(6):  # three terms: a read, a heartbeat, in turn
        await asyncio.sleep(TERM / 2)
        if i % 2:
            gateway.heartbeat(run.id, script)
        else:
            await gateway.submit(run.id, "psu", "VOLT? (@1)")
    assert gateway.get_run(run.id).status is RunStatus.ACTIVE
    assert gateway.get_request(held.id).status is Status.PENDING
    beat = gateway.heartbeat(run.id, script)
    assert beat["heartbeat_seconds"] == TERM and beat["seconds_left"] > TERM - 0.5
    assert volts(front_panel) == 0


async def test_only_its_own_client_keeps_a_run_open(
        gateway: Gateway, script: Principal, olga: Principal) -> None:
    """Someone else's heartbeat: another requester is refused; an operator's renews the
    leases only (a person keeping a gone client's run open could approve its write for
    nobody). A heartbeat on a closed run reopens nothing: a conflict with the reason."""
    run = gateway.create_run(script, "agent", heartbeat_seconds=TERM)
    other = Principal(name="mallory", role=Role.REQUESTER)
    with pytest.raises(PermissionDenied):
        gateway.heartbeat(run.id, other)

    async def olga_beats() -> None:
        with contextlib.suppress(TransitionError):  # the beat after the close: a conflict
            while True:
                gateway.heartbeat(run.id, olga)
                await asyncio.sleep(0.2)
    beats = asyncio.create_task(olga_beats())
    try:
        await until(lambda: gateway.get_run(run.id).status is RunStatus.CLOSED, TERM + 1.0)
    finally:
        beats.cancel()
    with pytest.raises(TransitionError, match=r"closed .*client gone: no heartbeat"):
        gateway.heartbeat(run.id, script)
    assert gateway.get_run(run.id).status is RunStatus.CLOSED


@pytest.mark.parametrize("bad", [0, -5, MIN_TERM - 1, MAX_TERM + 1, 10**30, 2.5, True, "5"])
async def test_a_term_out_of_bounds_is_refused_with_why(
        gateway: Gateway, script: Principal, bad: Any) -> None:
    with pytest.raises(InvalidInput, match="heartbeat_seconds must be a whole number of "
                                           f"seconds from {MIN_TERM} to {MAX_TERM}"):
        gateway.create_run(script, "agent", heartbeat_seconds=bad)
    assert gateway.list_runs(script) == [], "nothing was created"
    assert gateway.store.kv_items("run_terms") == []


async def test_a_term_holds_across_a_restart_from_start_up(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        front_panel: Any) -> None:
    """The gateway is down longer than the term: after the restart the run is not closed at
    once (the process being down is no silence of the client's), nor is it forgotten: it
    closes one term after start-up unless heard from."""
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    run = gw.create_run(script, "agent", heartbeat_seconds=TERM)
    held = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
    assert held is not None
    await gw.close()  # as a crash leaves it
    gw.store.close()
    await asyncio.sleep(TERM + 0.5)  # down for longer than the term

    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        assert gw.get_run(run.id).status is RunStatus.ACTIVE, "closed early"
        await asyncio.sleep(TERM * 0.75)
        assert gw.get_request(held.id).status is Status.PENDING, "closed early"
        gw.heartbeat(run.id, script)  # the client is back: heard, then silent
        heard = time.monotonic()
        await until(lambda: gw.get_request(held.id).status is Status.CANCELLED, TERM + 1.0)
        assert time.monotonic() - heard >= TERM - 0.2
        assert gw.get_run(run.id).status is RunStatus.CLOSED
        assert gw.store.kv_items("run_terms") == []
    finally:
        await gw.close()
        gw.store.close()
    assert volts(front_panel) == 0


async def test_a_term_starts_when_its_run_is_created(
        gateway: Gateway, script: Principal) -> None:
    """A gateway up longer than the term: a run made now is not closed at once (its term
    was counted from start-up, so a new agent's run closed before its first write)."""
    await asyncio.sleep(TERM + 0.5)
    run = gateway.create_run(script, "agent", heartbeat_seconds=TERM)
    await asyncio.sleep(1.0)  # two sweeps
    assert gateway.get_run(run.id).status is RunStatus.ACTIVE


async def test_a_term_running_out_mid_write_lets_the_write_finish(
        config: BenchConfig, db_path: Path, script: Principal, olga: Principal,
        front_panel: Any) -> None:
    """The term runs out while a granted write's lane job is running (written, its
    read-back held back): the run closes, but the write is never cut in half: it is
    concluded (executed, read back, receipted), and nothing else of the run runs."""
    psu = config.instrument("psu")
    assert psu is not None
    link = SlowAfterWrite(PyvisaLink(psu), "VOLT", TERM + 1.0)
    gw = Gateway(config, SqliteStore(db_path), links={"psu": link})
    await gw.start()
    try:
        run = gw.create_run(script, "agent", heartbeat_seconds=TERM)
        asked = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
        later = (await gw.submit(run.id, "psu", "VOLT 3,(@2)")).request
        assert asked is not None and later is not None
        link.armed = True
        granting = asyncio.ensure_future(gw.grant(asked.id, olga, ["setpoint"],
                                                  proposal_hash=asked.proposal_hash))
        await asyncio.to_thread(link.landed.wait, 5)
        await until(lambda: gw.get_run(run.id).status is RunStatus.CLOSED, TERM + 1.0)
        assert gw.get_request(asked.id).status is Status.EXECUTING, "left to finish"
        done = (await granting).request
        assert done.status is Status.EXECUTED, (done.status, done.outcome)
        assert done.receipt is not None
        assert gw.get_request(later.id).status is Status.CANCELLED
    finally:
        await gw.close()
        gw.store.close()
    assert volts(front_panel, 1) == 2 and volts(front_panel, 2) == 0
