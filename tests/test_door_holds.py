"""What a script sees when a write waits for a person, through the socket door: GATE:STAT?
right behind a held write is answered at once (issue 18: it waited in line when sent with
no delay), and GATE:HOLD REFUSE (or socket_door.on_hold = "refuse") answers a held write
with -203 and its request id at once instead of blocking the stream."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
import pyvisa

from bench_gate.auth import Tokens
from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from bench_gate.proxy import Doors, start_doors
from tests.test_proxy import in_thread, next_pending

NO_ERROR = '+0,"No error"'


@pytest.fixture
async def doors(gateway: Gateway, config: BenchConfig) -> AsyncIterator[Doors]:
    for ic in config.instruments:
        ic.socket_port = 0
    d = await start_doors(gateway, Tokens(gateway.store), config)
    yield d
    await d.close()


@pytest.fixture
def open_client(doors: Doors) -> Iterator[Callable[..., Any]]:
    rm = pyvisa.ResourceManager("@py")
    opened: list[Any] = []

    def open_(instrument: str = "psu", timeout: int = 5000) -> Any:
        host, port = doors.addresses[instrument]
        res = rm.open_resource(f"TCPIP0::{host}::{port}::SOCKET", read_termination="\n",
                               write_termination="\n", timeout=timeout)
        opened.append(res)
        return res

    yield open_
    for res in opened:
        res.close()
    rm.close()


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
