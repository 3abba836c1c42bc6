"""What a script sees when a write waits for a person, through the socket door: GATE:STAT?
right behind a held write is answered at once (issue 18: it waited in line when sent with
no delay), and GATE:HOLD REFUSE (or socket_door.on_hold = "refuse") answers a held write
with -203 and its request id at once instead of blocking the stream; once approved, the
request runs when the same requester resends the identical command before it expires, once,
and never at its approval, at a restart, for someone else or for another command."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import pyvisa

from bench_gate.auth import Tokens
from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.models import EventType, Principal, Status, TakeoverRequest
from bench_gate.proxy import start_doors
from bench_gate.store import SqliteStore
from tests.conftest import Clock
from tests.doors.proxy.test_proxy import in_thread, next_pending

NO_ERROR = '+0,"No error"'


@pytest.mark.parametrize("attempt", range(8))
async def test_gate_stat_right_behind_a_held_write_is_answered_at_once(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal,
        attempt: int) -> None:
    psu = open_client(timeout=3000)

    def script() -> tuple[str, float]:
        # No delay between the write and the question: both lines in one send.
        psu.write_raw(b"VOLT 1.5,(@1)\nGATE:STAT?\n")
        start = time.monotonic()
        return psu.read(), time.monotonic() - start

    status, took = await in_thread(script)
    req = await next_pending(gateway)
    assert status.startswith(f'PENDING,"{req.id}","waiting for a person: setpoint"'), status
    assert took < 2, "GATE:STAT? waited for the decision"
    await gateway.grant(req.id, olga, list(req.required), proposal_hash=req.proposal_hash)
    assert Decimal(await in_thread(psu.query, "VOLT? (@1)")) == Decimal("1.5")


async def test_gate_stat_behind_a_write_that_passes_answers_in_its_turn(
        open_client: Callable[..., Any], gateway: Gateway) -> None:
    psu = open_client()

    def script() -> tuple[str, str]:
        psu.write_raw(b"*OPC\nGATE:STAT?\n*IDN?\n")
        return psu.read(), psu.read()

    status, idn = await in_thread(script)
    assert status == 'NONE,"",""'
    assert idn.startswith("Keysight Technologies,E36312A")
    assert not gateway.list_requests()


async def test_gate_stat_never_overtakes_an_answer_owed_before_it(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal) -> None:
    psu = open_client(timeout=15000)

    def script() -> tuple[str, str]:
        psu.write_raw(b"VOLT 2,(@1);:VOLT? (@1)\nGATE:STAT?\n")
        return psu.read(), psu.read()

    task = asyncio.ensure_future(in_thread(script))
    req = await next_pending(gateway)
    await asyncio.sleep(0.2)
    assert not task.done(), "an answer was sent before the one owed by the held message"
    await gateway.grant(req.id, olga, list(req.required), proposal_hash=req.proposal_hash)
    volts, status = await task
    assert Decimal(volts) == 2
    assert status.startswith(f'EXECUTED,"{req.id}"')


# ---------------------------------------------------------------- on_hold = refuse


def _errors(client: Any) -> list[str]:
    out = []
    while True:
        err = client.query("SYST:ERR?")
        if err == NO_ERROR:
            return out
        out.append(err)


async def test_refuse_answers_a_held_write_at_once_with_its_request(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal) -> None:
    psu = open_client(timeout=3000)

    def script() -> tuple[str, list[str], str, str]:
        psu.write("GATE:HOLD REFUSE")
        mode = psu.query("GATE:HOLD?")
        psu.write("VOLT 1.5,(@1)")
        idn = psu.query("*IDN?")  # the stream goes on at once
        return mode, _errors(psu), idn, psu.query("GATE:STAT?")

    mode, errors, idn, status = await in_thread(script)
    (req,) = gateway.list_requests(status=Status.PENDING)
    assert mode == "REFUSE"
    assert idn.startswith("Keysight Technologies,E36312A")
    assert errors == [f'-203,"Command protected; {req.id} waits for a person (setpoint): '
                      'approve it, then resend the same command on this connection"']
    assert status.startswith(f'PENDING,"{req.id}"')

    def resend() -> list[str]:
        psu.write("VOLT 1.5,(@1)")
        return _errors(psu)

    again = await in_thread(resend)  # still pending: the same request, no second one
    assert len(again) == 1 and req.id in again[0]
    assert [r.id for r in gateway.list_requests()] == [req.id]
    await gateway.grant(req.id, olga, list(req.required), proposal_hash=req.proposal_hash)

    def after() -> tuple[list[str], str]:
        psu.write("VOLT 1.5,(@1)")  # approved: this resend is its run, never a second one
        return _errors(psu), psu.query("VOLT? (@1)")

    errors, volts = await in_thread(after)
    assert errors == []
    assert Decimal(volts) == Decimal("1.5")
    assert [r.id for r in gateway.list_requests()] == [req.id]
    assert gateway.get_request(req.id).status is Status.EXECUTED


async def test_refuse_after_a_denial_asks_again(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal) -> None:
    psu = open_client(timeout=3000)
    await in_thread(psu.write, "GATE:HOLD REF;:GATE:RAT \"ramp\"")
    await in_thread(psu.write, "CURR 0.2,(@2)")
    first = await next_pending(gateway)
    await gateway.deny(first.id, olga, "not now", proposal_hash=first.proposal_hash)
    await in_thread(psu.write, "CURR 0.2,(@2)")
    second = await next_pending(gateway, {first.id})
    assert second.id != first.id
    errors = await in_thread(_errors, psu)
    assert [first.id in errors[0], second.id in errors[-1]] == [True, True]
    await in_thread(psu.write, "GATE:HOLD WAIT")
    assert await in_thread(psu.query, "GATE:HOLD?") == "WAIT"


async def test_on_hold_refuse_from_bench_toml(gateway: Gateway, config: BenchConfig) -> None:
    config.socket_door.on_hold = "refuse"
    for ic in config.instruments:
        ic.socket_port = 0
    doors = await start_doors(gateway, Tokens(gateway.store), config)
    rm = pyvisa.ResourceManager("@py")
    try:
        host, port = doors.addresses["psu"]
        psu = rm.open_resource(f"TCPIP0::{host}::{port}::SOCKET", read_termination="\n",
                               write_termination="\n", timeout=3000)

        def script() -> tuple[str, list[str]]:
            psu.write("VOLT 2,(@1)")
            return psu.query("GATE:HOLD?"), _errors(psu)

        mode, errors = await in_thread(script)
        assert mode == "REFUSE" and errors[0].startswith('-203,"Command protected; tk-')
        psu.close()
    finally:
        rm.close()
        await doors.close()


# ------------------------------------------ on_hold = refuse: the approved write runs at resend


def _step_events(gateway: Gateway, req: TakeoverRequest, kind: EventType) -> int:
    return sum(1 for e in gateway.store.journal(req.run_id, limit=10_000)
               if e.request_id == req.id and e.type is kind)


async def test_refuse_runs_the_approved_write_only_when_its_requester_resends_it(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal,
        front_panel: Any) -> None:
    psu, other = open_client(timeout=3000), open_client(timeout=3000)

    def hold(client: Any, command: str) -> list[str]:
        client.write("GATE:HOLD REFUSE")
        client.write(command)
        return _errors(client)

    first = await in_thread(hold, psu, "VOLT 1.5,(@1)")
    req = await next_pending(gateway)
    assert req.on_resend and req.id in first[0]
    granted = await gateway.grant(req.id, olga, list(req.required),
                                  proposal_hash=req.proposal_hash)
    # Approved, and it waits for the resend: nothing reached the instrument.
    assert granted.request.status is Status.APPROVED
    assert "runs when its requester resends" in granted.message
    assert Decimal(front_panel.query("VOLT? (@1)")) == 0
    status = await in_thread(psu.query, "GATE:STAT?")
    assert status.startswith(f'APPROVED,"{req.id}","approved: resend the same command')

    # Someone else (another connection, another run) sends the identical command: a request
    # of its own, and the approved one does not run.
    theirs = await in_thread(hold, other, "VOLT 1.5,(@1)")
    assert len(theirs) == 1 and theirs[0].startswith('-203,"Command protected; tk-')
    assert req.id not in theirs[0]
    # A different command on the same connection: a new request, the approved one waits.
    different = await in_thread(hold, psu, "VOLT 1.6,(@1)")
    assert len(different) == 1 and req.id not in different[0]
    assert gateway.get_request(req.id).status is Status.APPROVED
    assert Decimal(front_panel.query("VOLT? (@1)")) == 0

    def resend() -> tuple[list[str], str]:
        psu.write("VOLT 1.5,(@1)")
        return _errors(psu), psu.query("VOLT? (@1)")

    errors, volts = await in_thread(resend)  # the identical resend runs it, answered as a write
    assert errors == [] and Decimal(volts) == Decimal("1.5")
    assert Decimal(front_panel.query("VOLT? (@1)")) == Decimal("1.5")
    done = gateway.get_request(req.id)
    assert done.status is Status.EXECUTED and done.receipt is not None
    assert _step_events(gateway, req, EventType.STEP_STARTED) == 1
    resends = [e for e in gateway.store.journal(req.run_id, limit=10_000)
               if e.type is EventType.COMMAND_RECEIVED and e.data.get("resend_of") == req.id]
    assert len(resends) == 1

    # Once more: it never runs twice (the resend is a new request of its own).
    front_panel.write("VOLT 0.5,(@1)")
    again, volts = await in_thread(resend)
    assert len(again) == 1 and req.id not in again[0]
    assert Decimal(volts) == Decimal("0.5")
    assert _step_events(gateway, req, EventType.STEP_STARTED) == 1


async def test_refuse_resend_after_expiry_does_not_run_it(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal, clock: Clock,
        front_panel: Any) -> None:
    psu = open_client(timeout=3000)
    await in_thread(psu.write, "GATE:HOLD REFUSE;:GATE:HOLD?")
    assert await in_thread(psu.read) == "REFUSE"
    await in_thread(psu.write, "CURR 0.2,(@2)")
    req = await next_pending(gateway)
    await gateway.grant(req.id, olga, list(req.required), proposal_hash=req.proposal_hash)
    await in_thread(_errors, psu)
    clock.advance(seconds=(req.expires_at - clock()).total_seconds() + 1)

    def resend() -> list[str]:
        psu.write("CURR 0.2,(@2)")
        return _errors(psu)

    errors = await in_thread(resend)
    expired = gateway.get_request(req.id)
    assert expired.status is Status.EXPIRED and "not resent" in (expired.outcome or "")
    # The resend after the expiry is a new request; nothing was written.
    (fresh,) = gateway.list_requests(status=Status.PENDING)
    assert fresh.id != req.id and len(errors) == 1 and fresh.id in errors[0]
    assert Decimal(front_panel.query("CURR? (@2)")) != Decimal("0.2")
    assert _step_events(gateway, req, EventType.STEP_STARTED) == 0


async def _started(config: BenchConfig, db: Path, clock: Clock) -> Gateway:
    gw = Gateway(config, SqliteStore(db), clock=clock)
    await gw.start()
    return gw


async def _stopped(gw: Gateway) -> None:
    await gw.close()
    gw.store.close()


async def test_a_request_that_runs_on_resend_never_runs_at_a_restart_nor_twice(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, pete: Principal, front_panel: Any) -> None:
    gw = await _started(config, db_path, clock)
    run = gw.create_run(script, "script")
    req = (await gw.submit(run.id, "psu", "VOLT 2.5,(@1)", on_resend=True)).request
    late = (await gw.submit(run.id, "psu", "VOLT 3,(@3)", on_resend=True)).request
    assert req is not None and late is not None
    for r in (req, late):
        granted = await gw.grant(r.id, olga, list(r.required), proposal_hash=r.proposal_hash)
        assert granted.request.status is Status.APPROVED
    await _stopped(gw)

    gw = await _started(config, db_path, clock)  # start() runs approved requests: not these
    try:
        await gw.sweep()
        assert gw.get_request(req.id).status is Status.APPROVED
        assert Decimal(front_panel.query("VOLT? (@1)")) == 0
        # Only its own run, with its identical command, runs it.
        other = gw.create_run(pete, "script")
        assert await gw.resend(other.id, req.id, "VOLT 2.5,(@1)") is None
        assert await gw.resend(run.id, req.id, "VOLT 2.4,(@1)") is None
        ran = await gw.resend(run.id, req.id, "volt 2.5, (@1)")  # the same canonical command
        assert ran is not None and ran.status is Status.EXECUTED
        assert Decimal(front_panel.query("VOLT? (@1)")) == Decimal("2.5")
        front_panel.write("VOLT 0.5,(@1)")
        again = await gw.resend(run.id, req.id, "VOLT 2.5,(@1)")
        assert again is not None and again.status is Status.EXECUTED
        assert Decimal(front_panel.query("VOLT? (@1)")) == Decimal("0.5")
        # Approved and never resent: the sweeper ends it expired at its expiry.
        clock.advance(seconds=(late.expires_at - clock()).total_seconds() + 1)
        await gw.sweep()
        assert gw.get_request(late.id).status is Status.EXPIRED
        gone = await gw.resend(run.id, late.id, "VOLT 3,(@3)")
        assert gone is not None and gone.status is Status.EXPIRED
        assert gone.outcome is not None and "+00:00" not in gone.outcome, gone.outcome
    finally:
        await _stopped(gw)
    gw = await _started(config, db_path, clock)  # a second restart runs nothing
    try:
        await gw.sweep()
        assert Decimal(front_panel.query("VOLT? (@1)")) == Decimal("0.5")
        assert Decimal(front_panel.query("VOLT? (@3)")) == 0
        for r in (req, late):
            started = sum(1 for e in gw.store.journal(run.id, limit=10_000)
                          if e.request_id == r.id and e.type is EventType.STEP_STARTED)
            assert started == (1 if r is req else 0)
    finally:
        await _stopped(gw)
