"""The socket door: one asyncio TCP server per instrument, speaking raw SCPI like a LAN
instrument's port 5025. Each connection is a run of kind ``script``.

A connection has two tasks. The reader splits the byte stream into messages (LF, or CR LF)
and queues them; the processor handles them strictly in order, so a held write blocks every
later message of that connection until a person decides it. The reader keeps reading while
the processor waits, which is how a disconnect is noticed while a write is pending.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..auth import refuse_token
from ..confidence import stated_confidence
from ..doorway import answer, follow, scpi_code, settled, submit
from ..errors import GatewayError, InvalidInput, Refused, TransitionError
from ..models import Principal, Role, RunKind, Status, TakeoverRequest
from ..scpi import MAX_MESSAGE_LENGTH, ScpiError, classify, is_read_only
from ..states import Outcome
from . import _gate as gate
from ._gate import GateCommand, GateOp, is_gate_message, parse_gate, quote

if TYPE_CHECKING:
    from ._listen import Door

__all__ = ["READ_CHUNK", "Connection"]

logger = logging.getLogger(__name__)

#: Messages queued behind a held write before the reader stops reading (TCP back-pressure).
MAX_QUEUED = 1024
#: Gateway errors kept per connection; one more replaces the newest with -350.
ERROR_QUEUE_DEPTH = 30
READ_CHUNK = 65536
#: Written bytes buffered before the processor awaits drain().
HIGH_WATER = 1 << 16

_SYST_ERR = re.compile(r"^\s*:?SYST(?:EM)?:ERR(?:OR)?(?::NEXT)?\?\s*$", re.IGNORECASE)
_CLS = re.compile(r"^\s*\*CLS\s*$", re.IGNORECASE)
_OVERSIZED = object()
_EOF = object()


class _Early:
    """A ``GATE:STAT?`` (or ``GATE:PLAN?``) queued behind a write not classified yet: answered
    as soon as that write holds the stream, else in its turn."""

    __slots__ = ("answered", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.answered = False


def _status_op(text: str) -> GateOp | None:
    """GATE:STAT? or GATE:PLAN? alone in a message, else None."""
    try:
        ops = [c.op for c in parse_gate(text)]
    except ScpiError:
        return None
    return ops[0] if ops in ([GateOp.STATUS_QUERY], [GateOp.PLAN_QUERY]) else None


class Connection:
    """One client on one door: its run, its error queue, its pending rationale."""

    def __init__(self, door: Door, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, peer: str) -> None:
        self.door = door
        self.gateway = door.gateway
        self.instrument = door.config.name
        self.reader = reader
        self.writer = writer
        self.peer = peer
        self.principal = Principal(name=f"script@{peer}", role=Role.REQUESTER)
        self.run_id: str | None = None
        self.goal: str | None = None
        self.rationale: str | None = None
        self.confidence: float | None = None
        self.last_request: str | None = None
        self.last_plan: str | None = None
        self.errors: collections.deque[str] = collections.deque()
        self.queue: asyncio.Queue[object] = asyncio.Queue(maxsize=MAX_QUEUED)
        self.gone = asyncio.Event()
        #: The token presented with GATE:TOK was revoked: nothing more is handled, and the
        #: connection is closed.
        self.revoked = False
        self._unwatch: Callable[[], None] | None = None
        #: Queued messages that will produce an answer (a '?' in them): GATE:STAT? waits behind.
        self._queued_queries = 0
        self._early = []
        #: ``wait`` or ``refuse`` (socket_door.on_hold, GATE:HOLD): see _refuse_hold.
        self.on_hold = door.on_hold
        #: Writes answered -203 under ``refuse``: their canonical units -> request id.
        self._refused: dict[tuple[str, ...], str] = {}

    # ------------------------------------------------------------------ tasks
    async def serve(self) -> None:
        reader_task = asyncio.create_task(self._read_loop())
        try:
            while True:
                item = await self.queue.get()
                if item is _EOF or self.revoked:  # nothing queued runs in a revoked name
                    break
                if item is _OVERSIZED:
                    await self._push_error(-223, f"message longer than {MAX_MESSAGE_LENGTH} "
                                           "characters; it was discarded")
                    continue
                if isinstance(item, _Early):
                    if item in self._early:
                        self._early.remove(item)
                    if not item.answered:  # nothing held before it: answered in its turn
                        await self._handle(item.text)
                    continue
                assert isinstance(item, str)
                if "?" in item:
                    self._queued_queries -= 1
                if self.gone.is_set() and not is_read_only(item, self.door.profile):
                    continue  # its client is gone: a write it queued never runs for nobody
                try:
                    await self._handle(item)
                except GatewayError as exc:
                    await self._push_error(scpi_code(exc), exc.message)
        finally:
            reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader_task
            self.gone.set()
            self._finish()
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    def _finish(self) -> None:
        """The client is gone: cancel whatever it still has pending (journaled by the core)."""
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        if self.run_id is None:
            return
        self.gateway.client_connected(self.run_id, False)  # its lease now runs out
        try:
            self.gateway.close_run(self.run_id, self._why_gone())
        except GatewayError as exc:  # pragma: no cover - the store failing at close
            logger.warning("closing run %s failed: %s", self.run_id, exc.message)

    async def _read_loop(self) -> None:
        buf = bytearray()
        discarding = False
        try:
            while True:
                chunk = await self.reader.read(READ_CHUNK)
                if not chunk:
                    break
                start = 0
                while True:
                    end = chunk.find(b"\n", start)
                    if end < 0:
                        if not discarding:
                            buf += chunk[start:]
                            if len(buf) > MAX_MESSAGE_LENGTH + 1:
                                buf.clear()
                                discarding = True
                        break
                    piece = chunk[start:end]
                    start = end + 1
                    if discarding:
                        discarding = False
                        await self.queue.put(_OVERSIZED)
                        continue
                    buf += piece
                    line = bytes(buf)
                    buf.clear()
                    await self._enqueue(line)
            if buf and not discarding:
                await self._enqueue(bytes(buf))
        except (ConnectionError, OSError):
            pass
        finally:
            self.gone.set()
            with contextlib.suppress(asyncio.QueueFull):
                self.queue.put_nowait(_EOF)
            if self.queue.full():  # make room for the end marker: the client is gone anyway
                await self.queue.put(_EOF)

    async def _enqueue(self, line: bytes) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line.strip():
            return
        if len(line) > MAX_MESSAGE_LENGTH:
            await self.queue.put(_OVERSIZED)
            return
        # latin-1 maps every byte to one character; the lexer refuses anything not ASCII.
        text = line.decode("latin-1")
        if is_gate_message(text) and (self._stop_now(text) or self._answer_now(text)):
            return
        if is_gate_message(text) and self._answers_early(text):
            # Behind a write the processor has not classified yet (it may be about to hold):
            # answered the moment it holds, without waiting for its decision.
            early = _Early(text)
            self._early.append(early)
            await self.queue.put(early)
            return
        if "?" in text:
            self._queued_queries += 1
        await self.queue.put(text)

    def _stop_now(self, text: str) -> bool:
        """GATE:STOP never waits behind anything this connection sent before it: the
        emergency stop runs at once, and its errors (if any) join the error queue."""
        try:
            commands = parse_gate(text)
        except ScpiError:
            return False
        if [c.op for c in commands] != [GateOp.STOP]:
            return False
        self._stopping = asyncio.ensure_future(self._emergency_stop())
        return True

    async def _emergency_stop(self) -> None:
        try:
            await self.gateway.emergency_stop(self.principal, "socket door")
        except GatewayError as exc:
            await self._push_error(-200, f"the emergency stop failed: {exc.message}")

    _stopping: asyncio.Future[None] | None = None

    def _answer_now(self, text: str) -> bool:
        """GATE:STAT? (or GATE:PLAN?) jumps the queue while a held write blocks the stream
        and no answer is owed before it, so a script can ask about what it is waiting
        behind."""
        if self._queued_queries or self._owing or not self._holding:
            return False
        op = _status_op(text)
        if op is None:
            return False
        self._send_status(op)
        return True

    def _answers_early(self, text: str) -> bool:
        """The race of issue 18: a GATE:STAT? sent right after a write reaches the reader
        before the processor has classified that write, so nothing holds yet. With no
        answer owed before it and something ahead of it, it waits for that to hold."""
        if self._queued_queries or self._owing or self._holding:
            return False
        if not (self._busy or self.queue.qsize()):
            return False
        return _status_op(text) is not None

    def _send_status(self, op: GateOp) -> None:
        if op is GateOp.STATUS_QUERY:
            self._send(gate.request_status(self.gateway, self.last_request))
        else:
            self._send(gate.plan_status(self.gateway, self.last_plan))

    def _answer_early(self) -> None:
        """The stream now holds: answer the GATE:STAT? queued behind the held write."""
        for early in self._early:
            op = _status_op(early.text)
            if op is not None and not early.answered:
                self._send_status(op)
                early.answered = True
        self._early.clear()

    _busy = False
    _owing = False
    _holding = False
    _early: list[_Early]

    def hang_up(self) -> None:
        """End the connection from our side: the reader sees EOF, a held write is cancelled."""
        self.gone.set()
        self.writer.close()

    def _revoked(self) -> None:
        """The connection's token was revoked (told by ``Tokens.watch``): hang up now; the
        held write and the run's undecided requests are cancelled, nothing queued runs."""
        self.revoked = True
        logger.info("%s door: closing %s's connection from %s: its token was revoked",
                    self.instrument, self.principal.name, self.peer)
        self.hang_up()

    def _why_gone(self) -> str:
        return "its token was revoked" if self.revoked else "the requester disconnected"

    # ------------------------------------------------------------------ output
    def _send(self, response: str) -> None:
        if self.gone.is_set() and self.writer.is_closing():
            return
        self.writer.write(response.encode("latin-1", "replace") + b"\n")

    async def _flush(self) -> None:
        transport = self.writer.transport
        if transport.get_write_buffer_size() > HIGH_WATER:
            with contextlib.suppress(ConnectionError):
                await self.writer.drain()

    async def _push_error(self, code: int, reason: str) -> None:
        """Queue one gateway error, after whatever the instrument already holds (oldest first)."""
        await self._drain_instrument_errors()
        if len(self.errors) >= ERROR_QUEUE_DEPTH:
            self.errors.pop()
            self.errors.append(gate.error_text(-350, "Queue overflow"))
            return
        self.errors.append(gate.error_text(code, gate.scpi_message(code, reason)))

    async def _drain_instrument_errors(self) -> None:
        if self.run_id is None or not self.door.has_error_queue:
            return
        for _ in range(ERROR_QUEUE_DEPTH):
            try:
                r = await self.gateway.submit(self.run_id, self.instrument, "SYST:ERR?",
                                              origin="gateway")
            except GatewayError:
                return
            text = (r.response or "").strip()
            if r.status is not Outcome.EXECUTED or not text or text.lstrip("+").startswith("0"):
                return
            if len(self.errors) < ERROR_QUEUE_DEPTH:
                self.errors.append(text)

    # ------------------------------------------------------------------ messages
    def _ensure_run(self) -> str:
        if self.run_id is None:
            run = self.gateway.create_run(self.principal, RunKind.SCRIPT, self.goal,
                                          attached="socket")
            self.run_id = run.id
            self.gateway.client_connected(run.id, True)  # renews its leases while here
        return self.run_id

    async def _handle(self, text: str) -> None:
        if is_gate_message(text):
            await self._gate(text)
            return
        if self.errors:
            if _SYST_ERR.match(text):
                self._send(self.errors.popleft())
                await self._flush()
                return
            if _CLS.match(text):
                self.errors.clear()
        run_id = self._ensure_run()
        rationale, confidence = self.rationale, self.confidence
        self._busy = True
        self._owing = "?" in text
        try:
            if self.on_hold == "refuse" and await self._resent(text):
                return
            try:
                result = await submit(self.gateway, run_id, self.instrument, text,
                                      rationale=rationale, confidence=confidence)
            except Refused as exc:
                self.rationale = self.confidence = None
                await self._push_error(exc.code, exc.message)
                return
            if (rationale is not None or confidence is not None) and (
                    result.request is not None or not is_read_only(text, self.door.profile)):
                self.rationale = self.confidence = None
            if result.status is Outcome.EXECUTED:
                if result.response:
                    self._send(result.response)
                    await self._flush()
                return
            if result.request is None:  # pragma: no cover - the core always returns one
                await self._push_error(-200, f"unexpected result {result.status!r}")
                return
            if self.on_hold == "refuse" and result.request.status is Status.PENDING:
                await self._refuse_hold(result.request)
                return
            final = await self._decision(result.request)
            await self._report(final)
        finally:
            self._busy = self._owing = False

    # ------------------------------------------------------------------ on_hold = refuse
    async def _refuse_hold(self, req: TakeoverRequest) -> None:
        """``refuse``: the stream never waits for a person. The held write is answered at
        once with -203 naming its request, which stays pending for the operator; the script
        resends the same command once it is approved (see :meth:`_resent`)."""
        self.last_request = req.id
        self._refused[tuple(a.canonical for a in req.actions)] = req.id
        self._refused[("", req.message.strip())] = req.id  # VOLT 5 names no channel
        missing = ", ".join(k.value for k in req.missing()) or "a decision"
        await self._push_error(-203, f"{req.id} waits for a person ({missing}): approve it, "
                               "then resend the same command on this connection")

    def _canonical(self, text: str) -> tuple[str, ...] | None:
        try:
            return classify(text, self.door.profile).canonical
        except ScpiError:
            return None

    async def _resent(self, text: str) -> bool:
        """A resend of a write refused under ``refuse``: never a second request. Still
        pending: -203 again. Approved or executing: waited for, then reported like a held
        write. Executed (the core runs an approved request when its last approval is
        given): answered from its receipt, never run twice. Denied, expired, cancelled:
        forgotten, and the resend is submitted afresh. True if the resend was dealt with."""
        keys = [k for k in (self._canonical(text), ("", text.strip())) if k is not None]
        request_id = next((self._refused[k] for k in keys if k in self._refused), None)
        if request_id is None:
            return False
        for key in [k for k, v in self._refused.items() if v == request_id]:
            del self._refused[key]  # one resend takes it; a pending one is put back below
        try:
            req = self.gateway.get_request(request_id)
        except GatewayError:
            return False
        if req.status is Status.PENDING:
            await self._refuse_hold(req)
            return True
        if req.status in (Status.APPROVED, Status.EXECUTING) or (
                req.status is Status.STALE and req.superseded_by):
            await self._report(await self._decision(req))
            return True
        if req.status is Status.EXECUTED:
            await self._report(req)
            return True
        return False

    async def _decision(self, req: TakeoverRequest) -> TakeoverRequest:
        """Hold the stream until a person decides (following a stale request to its fresh
        one), or the client goes away, in which case the request is cancelled."""
        self.last_request = req.id
        self._holding = True
        self._answer_early()
        try:
            req = await follow(self.gateway, req, None, until=self.gone, seen=self._seen)
            if not settled(req.status, req.superseded_by):  # the client went away
                return await self._cancel(req)
            return req
        finally:
            self._holding = False

    def _seen(self, req: TakeoverRequest) -> None:
        self.last_request = req.id  # GATE:STAT? tells of the one waited on now

    async def _cancel(self, req: TakeoverRequest) -> TakeoverRequest:
        """The client is gone: its request stays for the operator to see, cancelled."""
        try:
            return await self.gateway.cancel(req.id, self.principal, self._why_gone())
        except TransitionError:  # decided in the meantime
            return self.gateway.get_request(req.id)

    async def _report(self, req: TakeoverRequest) -> None:
        if req.status is Status.EXECUTED:
            queried = any(a.canonical.split(" ")[0].endswith("?") for a in req.actions)
            text = answer(req)
            if queried and text:
                self._send(text)
                await self._flush()
            return
        outcome = req.outcome or req.status.value
        if req.notes and req.notes not in outcome:
            outcome += f" ({req.notes})"
        code = -200 if req.status in (Status.FAILED, Status.AMBIGUOUS) else -203
        await self._push_error(code, f"{req.id} {outcome}")

    # ------------------------------------------------------------------ GATE
    async def _gate(self, text: str) -> None:
        try:
            commands = parse_gate(text)
        except ScpiError as exc:
            await self._push_error(exc.code, exc.message)
            return
        answers: list[str] = []
        for cmd in commands:
            answer = await self._gate_one(cmd)
            if answer is not None:
                answers.append(answer)
        if answers:
            self._send(";".join(answers))
            await self._flush()

    async def _gate_one(self, cmd: GateCommand) -> str | None:
        op = cmd.op
        if op is GateOp.TOKEN:
            principal = self.door.tokens.verify(cmd.text)
            if principal is None:
                await self._push_error(-203, "token not recognised (or revoked); this "
                                       f"connection stays {self.principal.name}")
            elif self.run_id is not None and principal.name != self.principal.name:
                await self._push_error(-221, "Settings conflict; send GATE:TOK before the "
                                       "first instrument command: the run already belongs "
                                       f"to {self.principal.name}")
            else:
                self.principal = principal
                if self._unwatch is not None:  # the latest token presented is the one
                    self._unwatch()
                self._unwatch = self.door.tokens.watch(str(cmd.text), self._revoked)
        elif op is GateOp.GOAL:
            try:
                refuse_token(cmd.text, "GATE:GOAL")
            except InvalidInput as exc:  # never kept, never journaled
                await self._push_error(-224, exc.message)
                return None
            self.goal = cmd.text
            if self.run_id is not None and cmd.text is not None:
                self.gateway.set_goal(self.run_id, cmd.text)
        elif op is GateOp.GOAL_QUERY:
            return quote(self.goal or "")
        elif op is GateOp.RATIONALE:
            try:
                refuse_token(cmd.text, "GATE:RAT")
                stated_confidence(cmd.text)
            except InvalidInput as exc:  # not kept: the next write goes without one
                self.rationale = None
                await self._push_error(-224, exc.message)
                return None
            self.rationale = cmd.text or None
        elif op is GateOp.RATIONALE_QUERY:
            return quote(self.rationale or "")
        elif op is GateOp.CONFIDENCE:
            self.confidence = cmd.number
        elif op is GateOp.STATUS_QUERY:
            return gate.request_status(self.gateway, self.last_request)
        elif op is GateOp.RUN_QUERY:
            return quote(self._ensure_run())
        elif op is GateOp.PLAN:
            await self._plan(cmd)
        elif op is GateOp.PLAN_QUERY:
            return gate.plan_status(self.gateway, self.last_plan)
        elif op is GateOp.STOP:  # normally taken at once by _stop_now
            await self._emergency_stop()
        elif op is GateOp.HOLD:
            self.on_hold = str(cmd.text)
        elif op is GateOp.HOLD_QUERY:
            return self.on_hold.upper()
        return None

    async def _plan(self, cmd: GateCommand) -> None:
        """Ask for a standing plan, then hold the stream until it is decided, like a held
        write: ``*OPC?`` after ``GATE:PLAN`` answers once the plan is active or refused."""
        scope = dict(cmd.scope or {})
        named = scope.setdefault("instrument", self.instrument)
        if named != self.instrument:
            await self._push_error(-221, f"Settings conflict; this door is {self.instrument}'s: "
                                   f"ask for a plan on {named!r} through its own door")
            return
        run_id = self._ensure_run()
        rationale, self.rationale = self.rationale, None
        try:
            req = await self.gateway.request_plan(run_id, scope, rationale)
        except InvalidInput as exc:
            await self._push_error(-222, exc.message)
            return
        self.last_plan = req.plan_id
        final = await self._decision(req)
        if final.status is not Status.EXECUTED:
            await self._report(final)
