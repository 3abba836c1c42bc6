"""A socket-door connection's inbox (bench_gate/proxy/_stream.py): messages come out in the
order the reader put them, it never holds more than its bound but for the end marker, and a
full inbox tells its reader when the processor has taken a message (the reader stops
reading meanwhile: TCP back-pressure)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench_gate.proxy import EOF, Inbox


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


async def test_a_full_inbox_calls_back_once_a_message_is_taken() -> None:
    inbox = Inbox(1)
    inbox.put_nowait("first")
    with pytest.raises(asyncio.QueueFull):
        inbox.put_nowait("second")
    room: list[int] = []
    inbox.when_room(lambda: room.append(inbox.qsize()))
    assert await inbox.get() == "first"
    await asyncio.sleep(0)
    assert room == [0]  # once, with room for the next
    inbox.put_nowait("second")
    assert await inbox.get() == "second"
    await asyncio.sleep(0)
    assert room == [0]
    waiting = asyncio.ensure_future(inbox.get())
    await asyncio.sleep(0)
    assert not waiting.done()
    inbox.put_nowait("third")
    assert await asyncio.wait_for(waiting, 1) == "third"
    inbox.put_nowait("fourth")
    inbox.end()  # the end marker goes in even when full
    assert inbox.qsize() == 2
    assert await inbox.get() == "fourth"
    assert await inbox.get() is EOF
