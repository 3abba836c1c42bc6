"""A message as long as the gateway takes (MAX_MESSAGE_LENGTH, 8192 characters) is judged
in a bounded time: the envelope check judges every state its units pass through, and it
runs on the event loop every door and the emergency stop share.

It was quadratic: each state was predicted again from the live snapshot through every unit
before it, so ``INST CH1;VOLT 1;VOLT 1;...`` (1,150 units in 8 KB) held the event loop for
about 10 s (an emergency stop from another door waited behind it). Each state is now the one
before it plus one unit."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.scpi import MAX_MESSAGE_LENGTH


def _longest(unit: str, last: str = "") -> str:
    head = "INST CH1"
    n = (MAX_MESSAGE_LENGTH - len(head) - len(last) - 2) // (len(unit) + 1)
    return ";".join([head, *[unit] * n, *([last] if last else [])])


@pytest.mark.parametrize(("unit", "last", "status"), [
    ("VOLT 1", "", "pending"), ("VOLT 1", "VOLT 7", "refused"),
    (":OUTP:PROT:CLE (@1)", "", "pending"), (":OUTP:PROT:CLE (@1)", ":VOLT 7,(@1)", "refused")])
async def test_the_longest_message_of_setpoints_is_judged_at_once(
        gateway: Gateway, script: Principal, front_panel: Any, unit: str, last: str,
        status: str) -> None:
    """CH1 on at 1 V (its envelope 6 V); 1,150 units of ``VOLT 1`` (and a last one at 7 V):
    judged in well under a second of event loop, the 7 V refused (-222). A tick of the loop
    every 50 ms never waits more than 2 s. So too for a message of protection clears, each
    judged with its channel on to the end of the message (``revives``)."""
    front_panel.write("VOLT 1,(@1);:CURR 0.1,(@1);:OUTP ON,(@1)")
    assert front_panel.query("*OPC?").strip() == "1"
    run = gateway.create_run(script, "script", goal="a long message")
    message = _longest(unit, last)
    assert len(message) <= MAX_MESSAGE_LENGTH and message.count(";") > 400
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticks() -> None:
        last_tick = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.05)
            now = time.perf_counter()
            gaps.append(now - last_tick)
            last_tick = now

    ticker = asyncio.create_task(ticks())
    await asyncio.sleep(0.1)
    started = time.perf_counter()
    result = await gateway.submit(run.id, "psu", message)
    took = time.perf_counter() - started
    done.set()
    await ticker
    assert result.status == status, result
    if status == "refused":
        assert result.code == -222, result
    assert took < 3, f"{took:.1f} s to judge one message"
    assert max(gaps) < 2, f"the event loop stood still for {max(gaps):.1f} s"
    assert float(front_panel.query("VOLT? (@1)")) == 1
    assert front_panel.query("OUTP? (@1)").strip() == "1"
