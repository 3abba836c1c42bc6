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
from bench_gate.models import Principal
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
