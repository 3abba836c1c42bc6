"""The socket door's error queue never repeats a token: ``GATE:PLAN "bg_…",…`` (a token
pasted where the instrument's name goes) was answered
``-221,"Settings conflict; … ask for a plan on 'bg_…' through its own door"`` with the
whole secret in it, the token of whoever it belonged to."""

from __future__ import annotations

import asyncio

from bench_gate.auth import Tokens
from bench_gate.gateway import Gateway
from bench_gate.models import Status
from bench_gate.proxy import Doors


async def test_an_error_never_repeats_a_token(gateway: Gateway, doors: Doors) -> None:
    _record, secret = Tokens(gateway.store).create("olga", "operator")
    host, port = doors.addresses["psu"]
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for message in (f'GATE:PLAN "{secret}",(@1),0,5,0.5,NONE,ON,40,30',
                        f'GATE:PLAN "psu{secret}",(@1),0,5,0.5,NONE,ON,40,30'):
            writer.write(message.encode() + b"\nSYST:ERR?\n")
            await writer.drain()
            answer = (await asyncio.wait_for(reader.readline(), 10)).decode("latin-1")
            assert answer.startswith("-221,"), answer
            assert secret[3:] not in answer, answer
            assert "(withheld)" in answer, answer
    finally:
        writer.close()
    assert gateway.list_requests(status=Status.PENDING) == []
