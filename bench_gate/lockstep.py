"""Answers in step: a sync point after the reads a write is judged on.

An instrument answers its queries in order (IEEE 488.2 §6.3: one response message per query
message, in the order asked). The gateway reads a state (the recheck before a write, the
read-back after it), then asks ``*OPC?``, whose only answer is ``1`` (§10.18). An answer the
instrument sent ahead of its time (a stale answer buffered from before, a second line, the
rest of an answer cut in two) makes the last answer read someone else's: the state read may
be another moment's, and the real answer to it comes where ``1`` should. So anything but
``1`` there means the state just read cannot be trusted: the connection is dropped (the next
command starts on a new one) and the caller treats the instrument as unknown: nothing is
written on it, a read-back that fails this way is no read-back.

A raw-socket link also refuses a query while bytes nobody asked for wait
(socket_link.SocketLink.query), so a second line that came in the same packet as an answer
is found here too, not silently skipped on a new connection.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from .core import Instrument
from .errors import InstrumentError
from .instruments import AsyncLink

__all__ = ["SYNC", "in_step"]

#: IEEE 488.2 §10.18: answers 1 once everything before it is done, after every earlier answer.
SYNC = "*OPC?"


async def in_step(link: AsyncLink, inst: Instrument) -> None:
    """Raise :class:`InstrumentError` (the connection dropped) unless the instrument's
    answer to ``*OPC?`` is ``1``: the answers read before it were the answers to what was
    asked. A profile without ``*OPC?`` (the SPD3303X) has no sync point: nothing is checked."""
    profile = inst.profile
    if profile.lookup(True, ("OPC",)) is None or "*OPC?" in profile.model.lacks:
        return
    name = inst.config.name
    answer = await link.query(SYNC)  # a timeout, or bytes nobody asked for: it raises
    try:
        synced = Decimal(answer.strip()) == 1
    except InvalidOperation:
        synced = False
    if not synced:
        await inst.lane.drop()
        raise InstrumentError(
            f"{name}: answers out of step: {SYNC} answered {answer[:80]!r}, not 1 (an "
            "answer came ahead of its time, so the state read before it may be another "
            "moment's); the connection was dropped")
