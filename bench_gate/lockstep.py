"""Answers in step: a sync point after the reads a write is judged on.

An instrument answers its queries in order (IEEE 488.2 §6.3: one response message per query
message, in the order asked). The gateway reads a state (the recheck before a write, the
read-back after it, the confirmation of a safe action), then asks ``*IDN?`` once more, whose
answer it has just read (a stop's read-back, which reads no identity: ``*IDN?`` twice). An answer
the instrument sent ahead of its time (a stale answer buffered from before, a second line,
the rest of an answer cut in two) makes the last answer read someone else's: the state read
may be another moment's, and the real answer to it comes where the identity should. So
anything but the identity there means the state just read cannot be trusted: the connection
is dropped (the next command starts on a new one) and the caller treats the instrument as
unknown: nothing is written on it, and a read-back that fails this way is no read-back.

``*IDN?``, not ``*OPC?``: ``*OPC?`` waits for every pending operation (a meter's
``INIT`` with ``TRIG:COUN INF`` never ends), ``*IDN?`` answers at once, on every profile.

A raw-socket link also refuses a query while bytes nobody asked for wait
(socket_link.SocketLink.query), so a second line that came in the same packet as an answer
is found here too, not silently skipped on a new connection.
"""

from __future__ import annotations

from .answers import shown
from .core import Instrument
from .errors import InstrumentError
from .instruments import AsyncLink
from .scpi.compound import IDN

__all__ = ["in_step", "in_step_twice"]


async def in_step(link: AsyncLink, inst: Instrument, idn: str) -> None:
    """Raise :class:`InstrumentError` (the connection dropped) unless ``*IDN?`` answers
    ``idn``, the identity read with the state just before: the answers read before it were
    the answers to what was asked. A timeout, or bytes nobody asked for, raise too."""
    answer = await link.query(IDN)
    if answer.strip() != idn.strip():
        await inst.lane.drop()
        raise InstrumentError(
            f"{inst.config.name}: answers out of step: {IDN} answered {shown(answer)}, not "
            "the identity read just before (an answer came ahead of its time, so the state "
            "read may be another moment's); the connection was dropped")


async def in_step_twice(link: AsyncLink, inst: Instrument) -> str:
    """The sync point where the identity is not known yet (a stop's read-back reads fields
    one by one): ``*IDN?`` twice, which must answer alike; the identity. Raise as
    :func:`in_step` does otherwise: an answer ahead of its time answers the first."""
    first = await link.query(IDN)
    await in_step(link, inst, first)
    return first.strip()
