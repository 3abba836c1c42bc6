"""A socket-door connection's inbox (bench_gate/proxy/_stream.py): messages come out in the
order the reader put them, it never holds more than its bound, and a put on a full inbox
waits for the processor (the reader stops reading: TCP back-pressure)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench_gate.proxy import Inbox


@given(st.integers(1, 5), st.lists(st.booleans(), max_size=60))
def test_messages_come_out_in_order_and_the_bound_holds(size: int, steps: list[bool]) -> None:
    async def go() -> None:
        inbox = Inbox(size)
        put: list[int] = []
        got: list[object] = []
        for is_put in steps:
            if is_put:
                try:
                    inbox.put_nowait(len(put))
                except asyncio.QueueFull:
                    assert inbox.full() and inbox.qsize() == size
                    continue
                put.append(len(put))
            elif inbox.qsize():
                got.append(await inbox.get())
            assert 0 <= inbox.qsize() <= size
        while inbox.qsize():
            got.append(await inbox.get())
        assert got == put

    asyncio.run(go())


async def test_a_put_on_a_full_inbox_waits_for_a_get_and_a_get_for_a_put() -> None:
    inbox = Inbox(1)
    await inbox.put("first")
    blocked = asyncio.ensure_future(inbox.put("second"))
    await asyncio.sleep(0)
    assert not blocked.done() and inbox.full()
    assert await inbox.get() == "first"
    await asyncio.wait_for(blocked, 1)
    assert await inbox.get() == "second"
    waiting = asyncio.ensure_future(inbox.get())
    await asyncio.sleep(0)
    assert not waiting.done()
    inbox.put_nowait("third")
    assert await asyncio.wait_for(waiting, 1) == "third"
    inbox.put_nowait("fourth")
    with pytest.raises(asyncio.QueueFull):
        inbox.put_nowait("fifth")
