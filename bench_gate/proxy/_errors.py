"""A socket-door connection's error queue: what ``SYST:ERR?`` answers.

The gateway's own errors (a refusal, a denial, a -203 under ``on_hold = refuse``) join the
queue after whatever the instrument already holds, oldest first (SCPI-99 vol. 2, 21.8.8:
``SYSTem:ERRor[:NEXT]?`` reads the oldest entry). While gateway errors wait, ``SYST:ERR?``
is answered from here and ``*CLS`` empties it (IEEE 488.2, 10.3); once empty, both go to the
instrument as usual.
"""

from __future__ import annotations

import collections
import re
from typing import TYPE_CHECKING

from ..errors import GatewayError
from ..states import Outcome
from . import _gate as gate

if TYPE_CHECKING:
    from ..gateway import Gateway

__all__ = ["ERROR_QUEUE_DEPTH", "ErrorQueue"]

#: Errors kept per connection; one more replaces the newest with -350 (SCPI-99 21.8.2).
ERROR_QUEUE_DEPTH = 30

_SYST_ERR = re.compile(r"^\s*:?SYST(?:EM)?:ERR(?:OR)?(?::NEXT)?\?\s*$", re.IGNORECASE)
_CLS = re.compile(r"^\s*\*CLS\s*$", re.IGNORECASE)


class ErrorQueue:
    """One connection's queue of error texts (``-203,"Command protected; ..."``)."""

    def __init__(self, gateway: Gateway, instrument: str, has_error_queue: bool) -> None:
        self.gateway = gateway
        self.instrument = instrument
        #: The instrument keeps its own queue, drained ahead of each gateway error.
        self.has_error_queue = has_error_queue
        self.items: collections.deque[str] = collections.deque()

    def __bool__(self) -> bool:
        return bool(self.items)

    def take(self, text: str) -> str | None:
        """The answer to ``text`` from this queue: the oldest entry for ``SYST:ERR?``; None
        for anything else (``*CLS`` empties the queue and still goes to the instrument)."""
        if not self.items:
            return None
        if _SYST_ERR.match(text):
            return self.items.popleft()
        if _CLS.match(text):
            self.items.clear()
        return None

    async def push(self, run_id: str | None, code: int, reason: str) -> None:
        """Queue one gateway error, after whatever the instrument already holds."""
        await self._drain_instrument(run_id)
        if len(self.items) >= ERROR_QUEUE_DEPTH:
            self.items.pop()
            self.items.append(gate.error_text(-350, "Queue overflow"))
            return
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
