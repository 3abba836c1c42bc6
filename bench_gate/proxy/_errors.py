"""A socket-door connection's error queue: what ``SYST:ERR?`` answers.

The gateway's own errors (a refusal, a denial, a -203 under ``on_hold = refuse``) join the
queue after whatever the instrument already holds, oldest first (SCPI-99 vol. 2, 21.8.8:
``SYSTem:ERRor[:NEXT]?`` reads the oldest entry), and set this connection's event bits as
the instrument's own error would set its ``*ESR?`` (IEEE 488.2, 11.5.1). While any of
them waits, the error and status units of every message are answered from here and the
instrument together (``_status.py``); ``*CLS`` empties both (IEEE 488.2, 10.3).
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

from ..errors import GatewayError
from ..states import Outcome
from ..texts import redact
from . import _gate as gate

if TYPE_CHECKING:
    from ..gateway import Gateway

__all__ = ["ERROR_QUEUE_DEPTH", "EVENT_BITS", "ErrorQueue", "event_bit"]

#: Errors kept per connection; one more replaces the newest with -350 (SCPI-99 21.8.2).
ERROR_QUEUE_DEPTH = 30

#: The standard event status bit an error sets, by its class (IEEE 488.2, 11.5.1.1): a
#: command error CME, an execution error EXE, a device-dependent one DDE, a query one QYE.
EVENT_BITS = {1: 32, 2: 16, 3: 8, 4: 4}


def event_bit(code: int) -> int:
    return EVENT_BITS.get(-code // 100, 0) if -500 < code < 0 else 0


class ErrorQueue:
    """One connection's queue of error texts (``-203,"Command protected; ..."``)."""

    def __init__(self, gateway: Gateway, instrument: str, has_error_queue: bool) -> None:
        self.gateway = gateway
        self.instrument = instrument
        #: The instrument keeps its own queue, drained ahead of each gateway error.
        self.has_error_queue = has_error_queue
        self.items: collections.deque[str] = collections.deque()
        #: The ``*ESR?`` bits this connection's own errors set, until read or cleared.
        self.events = 0

    def __bool__(self) -> bool:
        return bool(self.items) or bool(self.events)

    def clear(self) -> None:
        """``*CLS``: the queue and the event bits (IEEE 488.2, 10.3)."""
        self.items.clear()
        self.events = 0

    def keep(self, text: str) -> None:
        """An error the instrument answered while older ones waited here: queued last (on a
        full queue the newest becomes -350, as for a gateway error)."""
        if len(self.items) < ERROR_QUEUE_DEPTH:
            self.items.append(text)
        else:
            self.items[-1] = gate.error_text(-350, "Queue overflow")

    async def push(self, run_id: str | None, code: int, reason: str) -> None:
        """Queue one gateway error, after whatever the instrument already holds. Its text
        never repeats a token, whatever part of a message brought one (``texts.redact``)."""
        reason = redact(reason) or reason
        await self._drain_instrument(run_id)
        if len(self.items) >= ERROR_QUEUE_DEPTH:
            self.items.pop()
            self.items.append(gate.error_text(-350, "Queue overflow"))
            self.events |= event_bit(-350)
            return
        self.events |= event_bit(code)
        self.items.append(gate.error_text(code, gate.scpi_message(code, reason)))

    async def _drain_instrument(self, run_id: str | None) -> None:
        if run_id is None or not self.has_error_queue:
            return
        for _ in range(ERROR_QUEUE_DEPTH):
            try:
                r = await self.gateway.submit(run_id, self.instrument, "SYST:ERR?",
                                              origin="gateway")
            except GatewayError:
                return
            text = (r.response or "").strip()
            if r.status is not Outcome.EXECUTED or not text or text.lstrip("+").startswith("0"):
                return
            if len(self.items) < ERROR_QUEUE_DEPTH:
                self.items.append(text)
