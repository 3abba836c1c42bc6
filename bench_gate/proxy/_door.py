"""The socket door: one asyncio TCP server per instrument, speaking raw SCPI like a LAN
instrument's port 5025. Each connection is a run of kind ``script``.

A connection's protocol (``_stream.Reader``) cuts the byte stream into messages and queues
them as they arrive; its one task, the processor here, handles them strictly in order, so a
held write blocks every later message of that connection until a person decides it
(``_holds.py``). ``GATE`` commands are ``_commands.py``'s, the error queue ``_errors.py``'s,
and the error and status units it answers in any message (``SYST:ERR?``, ``*ESR?``, ...)
``_status.py``'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..auth import ANONYMOUS_PREFIX
from ..doorway import scpi_code, submit
from ..errors import GatewayError, Refused
from ..models import Principal, Role, RunKind, Status
from ..scpi import MAX_MESSAGE_LENGTH, is_read_only
from ..states import Outcome
from ._commands import gate_message
from ._errors import ErrorQueue
from ._gate import is_gate_message
from ._holds import decision, refuse_hold, report, resent
from ._status import StatusPlan, status_plan
from ._status import answer as status_answer
from ._stream import EOF, MAX_QUEUED, OVERSIZED, Early, Inbox, Reader

if TYPE_CHECKING:
    from ._listen import Door

__all__ = ["Connection"]

logger = logging.getLogger(__name__)


class Connection:
    """One client on one door: its run, its error queue, its pending rationale."""

    def __init__(self, door: Door, reader: Reader, transport: asyncio.Transport,
                 peer: str) -> None:
        self.door = door
        self.gateway = door.gateway
        self.instrument = door.config.name
        self.reader = reader
        self.transport = transport
        self.peer = peer
        self.principal = Principal(name=f"{ANONYMOUS_PREFIX}{peer}", role=Role.REQUESTER)
        self.run_id: str | None = None
        self.goal: str | None = None
        self.rationale: str | None = None
        self.confidence: float | None = None
        self.last_request: str | None = None
        self.last_plan: str | None = None
        self.errors = ErrorQueue(self.gateway, self.instrument, door.has_error_queue)
        self.queue = Inbox(MAX_QUEUED)
        self.gone = asyncio.Event()
        #: The token presented with GATE:TOK was revoked: nothing more is handled, and the
        #: connection is closed.
        self.revoked = False
        self._unwatch: Callable[[], None] | None = None
        #: Queued messages that will produce an answer (a '?' in them): GATE:STAT? waits behind.
        self.queued_queries = 0
        #: GATE:STAT? queued behind a write not classified yet (``_stream.Early``).
        self.early: list[Early] = []
        #: The processor is handling a message; it owes an answer; it waits on a decision.
        self.busy = self.owing = self.holding = False
        self.stopping: asyncio.Future[None] | None = None
        #: ``wait`` or ``refuse`` (socket_door.on_hold, GATE:HOLD): see ``_holds.py``.
        self.on_hold = door.on_hold
        #: Writes answered -203 under ``refuse``: their canonical units -> request id.
        self.refused: dict[tuple[str, ...], str] = {}

    # ------------------------------------------------------------------ tasks
    async def serve(self) -> None:
        try:
            while True:
                item = await self.queue.get()
                if item is EOF or self.revoked:  # nothing queued runs in a revoked name
                    break
                if item is OVERSIZED:
                    await self.push_error(-223, f"message longer than {MAX_MESSAGE_LENGTH} "
                                          "characters; it was discarded")
                    continue
                if isinstance(item, Early):
                    if item in self.early:
                        self.early.remove(item)
                    if not item.answered:  # nothing held before it: answered in its turn
                        await self._handle(item.text)
                    continue
                assert isinstance(item, str)
                if "?" in item:
                    self.queued_queries -= 1
                if self.gone.is_set() and not is_read_only(item, self.door.profile):
                    continue  # its client is gone: a write it queued never runs for nobody
                try:
                    await self._handle(item)
                except GatewayError as exc:
                    await self.push_error(scpi_code(exc), exc.message)
        finally:
            self.gone.set()
            self._finish()
            self.transport.close()
            await self.reader.closed

    def _finish(self) -> None:
        """The client is gone: cancel whatever it still has pending (journaled by the core)."""
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        if self.run_id is None:
            return
        self.gateway.client_connected(self.run_id, False)  # its lease now runs out
        try:
            self.gateway.close_run(self.run_id, self.why_gone())
        except GatewayError as exc:  # pragma: no cover - the store failing at close
            logger.warning("closing run %s failed: %s", self.run_id, exc.message)

    async def emergency_stop(self) -> None:
        try:
            await self.gateway.emergency_stop(self.principal, "socket door")
        except GatewayError as exc:
            await self.push_error(-200, f"the emergency stop failed: {exc.message}")

    def watch_token(self, token: str) -> None:
        """Close this connection the moment ``token`` is revoked."""
        if self._unwatch is not None:
            self._unwatch()
        self._unwatch = self.door.tokens.watch(token, self._revoked)

    def hang_up(self) -> None:
        """End the connection from our side: the reader sees EOF, a held write is cancelled."""
        self.gone.set()
        self.transport.close()

    def _revoked(self) -> None:
        """The connection's token was revoked (told by ``Tokens.watch``): hang up now; the
        held write and the run's undecided requests are cancelled, nothing queued runs."""
        self.revoked = True
        logger.info("%s door: closing %s's connection from %s: its token was revoked",
                    self.instrument, self.principal.name, self.peer)
        self.hang_up()

    def why_gone(self) -> str:
        return "its token was revoked" if self.revoked else "the requester disconnected"

    # ------------------------------------------------------------------ output
    def send(self, response: str) -> None:
        if self.transport.is_closing():  # hung up, or the client is gone
            return
        self.transport.write(response.encode("latin-1", "replace") + b"\n")

    async def flush(self) -> None:
        """Wait while the client has not read ``HIGH_WATER`` bytes of answers."""
        await self.reader.drained()

    async def answer(self, status: StatusPlan, response: str | None) -> None:
        """An executed message's answer with this connection's own status units answered in
        their place (``_status.py``); ``response`` None: answered from the queue alone."""
        text = await status_answer(self, status, response)
        if text:
            self.send(text)
            await self.flush()

    async def push_error(self, code: int, reason: str) -> None:
        """Queue one gateway error, after whatever the instrument already holds."""
        await self.errors.push(self.run_id, code, reason)

    # ------------------------------------------------------------------ messages
    def ensure_run(self) -> str:
        if self.run_id is None:
            run = self.gateway.create_run(self.principal, RunKind.SCRIPT, self.goal,
                                          attached="socket")
            self.run_id = run.id
            self.gateway.client_connected(run.id, True)  # renews its leases while here
        return self.run_id

    async def _handle(self, text: str) -> None:
        if is_gate_message(text):
            await gate_message(self, text)
            return
        status = status_plan(self.door.profile, text) if self.errors else None
        if status is not None and status.from_queue(self.errors):  # SYST:ERR? and the like
            await self.answer(status, None)
            return
        run_id = self.ensure_run()
        rationale, confidence = self.rationale, self.confidence
        self.busy = True
        self.owing = "?" in text
        try:
            if self.refused and await resent(self, text):
                return
            refusing = self.on_hold == "refuse"
            try:
                # A kept read runs in one step; anything else goes the whole way.
                result = None if rationale is not None or confidence is not None else \
                    await self.gateway.read(run_id, self.instrument, text)
                if result is None:
                    result = await submit(self.gateway, run_id, self.instrument, text,
                                          rationale=rationale, confidence=confidence,
                                          on_resend=refusing)
                elif result.status is Outcome.REFUSED:  # decided again, as excites
                    raise Refused(result.code, result.reason)
            except Refused as exc:
                self.rationale = self.confidence = None
                await self.push_error(exc.code, exc.message)
                return
            if (rationale is not None or confidence is not None) and (
                    result.request is not None or not is_read_only(text, self.door.profile)):
                self.rationale = self.confidence = None
            if result.status is Outcome.EXECUTED:
                if status is not None:
                    await self.answer(status, result.response or "")
                elif result.response:
                    self.send(result.response)
                    await self.flush()
                return
            if result.request is None:  # pragma: no cover - the core always returns one
                await self.push_error(-200, f"unexpected result {result.status!r}")
                return
            if refusing and result.request.status is Status.PENDING:
                await refuse_hold(self, result.request)
                return
            await report(self, await decision(self, result.request))
        finally:
            self.busy = self.owing = False
