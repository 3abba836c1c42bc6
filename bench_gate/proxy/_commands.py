"""What a socket-door connection does with each ``GATE`` command (parsed in ``_gate.py``):
its token, goal, rationale and confidence, status and plan queries, a plan request, the
emergency stop and the hold mode. Answers of one message are joined with ``;`` as in a
SCPI response message (IEEE 488.2, 8.4.1)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..auth import refuse_token
from ..confidence import stated_confidence
from ..errors import InvalidInput
from ..models import Status
from ..scpi import ScpiError
from . import _gate as gate
from ._gate import GateCommand, GateOp, parse_gate, quote
from ._holds import decision, report

if TYPE_CHECKING:
    from ._door import Connection

__all__ = ["gate_message"]


async def gate_message(conn: Connection, text: str) -> None:
    try:
        commands = parse_gate(text)
    except ScpiError as exc:
        await conn.push_error(exc.code, exc.message)
        return
    answers: list[str] = []
    for cmd in commands:
        answer = await _one(conn, cmd)
        if answer is not None:
            answers.append(answer)
    if answers:
        conn.send(";".join(answers))
        await conn.flush()


async def _token(conn: Connection, cmd: GateCommand) -> None:
    principal = conn.door.tokens.verify(cmd.text)
    if principal is None:
        await conn.push_error(-203, "token not recognised (or revoked); this connection "
                              f"stays {conn.principal.name}")
    elif conn.run_id is not None and principal.name != conn.principal.name:
        await conn.push_error(-221, "Settings conflict; send GATE:TOK before the first "
                              "instrument command: the run already belongs to "
                              f"{conn.principal.name}")
    else:
        conn.principal = principal
        conn.watch_token(str(cmd.text))  # the latest token presented is the one


async def _one(conn: Connection, cmd: GateCommand) -> str | None:
    op = cmd.op
    if op is GateOp.TOKEN:
        await _token(conn, cmd)
    elif op is GateOp.GOAL:
        try:
            refuse_token(cmd.text, "GATE:GOAL")
        except InvalidInput as exc:  # never kept, never journaled
            await conn.push_error(-224, exc.message)
            return None
        conn.goal = cmd.text
        if conn.run_id is not None and cmd.text is not None:
            conn.gateway.set_goal(conn.run_id, cmd.text)
    elif op is GateOp.GOAL_QUERY:
        return quote(conn.goal or "")
    elif op is GateOp.RATIONALE:
        try:
            refuse_token(cmd.text, "GATE:RAT")
            stated_confidence(cmd.text)
        except InvalidInput as exc:  # not kept: the next write goes without one
            conn.rationale = None
            await conn.push_error(-224, exc.message)
            return None
        conn.rationale = cmd.text or None
    elif op is GateOp.RATIONALE_QUERY:
        return quote(conn.rationale or "")
    elif op is GateOp.CONFIDENCE:
        conn.confidence = cmd.number
    elif op is GateOp.STATUS_QUERY:
        return gate.request_status(conn.gateway, conn.last_request)
    elif op is GateOp.RUN_QUERY:
        return quote(conn.ensure_run())
    elif op is GateOp.PLAN:
        await _plan(conn, cmd)
    elif op is GateOp.PLAN_QUERY:
        return gate.plan_status(conn.gateway, conn.last_plan)
    elif op is GateOp.STOP:  # normally taken at once by the reader
        await conn.emergency_stop()
    elif op is GateOp.HOLD:
        conn.on_hold = str(cmd.text)
    elif op is GateOp.HOLD_QUERY:
        return conn.on_hold.upper()
    return None


async def _plan(conn: Connection, cmd: GateCommand) -> None:
    """Ask for a standing plan, then hold the stream until it is decided, like a held
    write: ``*OPC?`` after ``GATE:PLAN`` answers once the plan is active or refused."""
    scope = dict(cmd.scope or {})
    named = scope.setdefault("instrument", conn.instrument)
    if named != conn.instrument:
        await conn.push_error(-221, f"Settings conflict; this door is {conn.instrument}'s: "
                              f"ask for a plan on {named!r} through its own door")
        return
    run_id = conn.ensure_run()
    rationale, conn.rationale = conn.rationale, None
    try:
        req = await conn.gateway.request_plan(run_id, scope, rationale)
    except InvalidInput as exc:
        await conn.push_error(-222, exc.message)
        return
    conn.last_plan = req.plan_id
    final = await decision(conn, req)
    if final.status is not Status.EXECUTED:
        await report(conn, final)
