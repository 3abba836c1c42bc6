"""What a socket-door connection does with a held write: wait for its decision (``on_hold =
wait``, the default), or answer -203 at once and take the resend (``on_hold = refuse``).

Waiting holds the stream (every later message of the connection waits behind it) until a
person decides, following a stale request to its fresh one; a client that goes away
cancels it. The outcome is reported as the instrument would: the answer of an executed
query, nothing for an executed write, an error in the queue otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..doorway import answer, follow, settled
from ..errors import GatewayError, TransitionError
from ..models import Status, TakeoverRequest
from ..scpi import ScpiError, classify
from ._status import status_plan
from ._stream import answer_early

if TYPE_CHECKING:
    from ._door import Connection

__all__ = ["decision", "refuse_hold", "report", "resent"]


async def decision(conn: Connection, req: TakeoverRequest) -> TakeoverRequest:
    """Hold the stream until a person decides (following a stale request to its fresh
    one), or the client goes away, in which case the request is cancelled."""
    conn.last_request = req.id
    conn.holding = True
    answer_early(conn)

    def seen(fresh: TakeoverRequest) -> None:
        conn.last_request = fresh.id  # GATE:STAT? tells of the one waited on now

    try:
        req = await follow(conn.gateway, req, None, until=conn.gone, seen=seen)
        if not settled(req.status, req.superseded_by):  # the client went away
            return await _cancel(conn, req)
        return req
    finally:
        conn.holding = False


async def _cancel(conn: Connection, req: TakeoverRequest) -> TakeoverRequest:
    """The client is gone: its request stays for the operator to see, cancelled."""
    try:
        return await conn.gateway.cancel(req.id, conn.principal, conn.why_gone())
    except TransitionError:  # decided in the meantime
        return conn.gateway.get_request(req.id)


async def report(conn: Connection, req: TakeoverRequest) -> None:
    if req.status is Status.EXECUTED:
        queried = any(a.canonical.split(" ")[0].endswith("?") for a in req.actions)
        text = answer(req)
        status = status_plan(conn.door.profile, req.message) if conn.errors else None
        if status is not None:  # its own error and status units answered in their place
            await conn.answer(status, text if queried and text else "")
        elif queried and text:
            conn.send(text)
            await conn.flush()
        return
    outcome = req.outcome or req.status.value
    if req.notes and req.notes not in outcome:
        outcome += f" ({req.notes})"
    code = -200 if req.status in (Status.FAILED, Status.AMBIGUOUS) else -203
    await conn.push_error(code, f"{req.id} {outcome}")


# ------------------------------------------------------------------ on_hold = refuse
async def refuse_hold(conn: Connection, req: TakeoverRequest) -> None:
    """``refuse``: the stream never waits for a person. The held write is answered at once
    with -203 naming its request, which stays pending for the operator; the script resends
    the same command once it is approved (see :func:`resent`)."""
    conn.last_request = req.id
    conn.refused[tuple(a.canonical for a in req.actions)] = req.id
    conn.refused[("", req.message.strip())] = req.id  # VOLT 5 names no channel
    missing = ", ".join(k.value for k in req.missing()) or "a decision"
    await conn.push_error(-203, f"{req.id} waits for a person ({missing}): approve it, then "
                          "resend the same command on this connection")


def _canonical(conn: Connection, text: str) -> tuple[str, ...] | None:
    try:
        return classify(text, conn.door.profile).canonical
    except ScpiError:
        return None


async def resent(conn: Connection, text: str) -> bool:
    """A resend of a write refused under ``refuse``: never a second request. Still pending:
    -203 again. Approved: run now, once, if it is the identical canonical command (the core
    checks it, the run and the expiry), and answered like a write that ran at once; gone
    stale at the recheck: -203 naming its fresh request. Executed by this resend (or
    failed at it): answered from its receipt, and forgotten, so the next resend is a new
    request. Denied, expired, cancelled, or not this request's command: forgotten, and the
    resend is submitted afresh. True if the resend was dealt with."""
    keys = [k for k in (_canonical(conn, text), ("", text.strip())) if k is not None]
    request_id = next((conn.refused[k] for k in keys if k in conn.refused), None)
    if request_id is None or conn.run_id is None:
        return False
    for key in [k for k, v in conn.refused.items() if v == request_id]:
        del conn.refused[key]  # one resend takes it; a pending one is put back below
    ran_now = False
    try:
        req = conn.gateway.get_request(request_id)
        if req.on_resend and req.status is Status.APPROVED:
            ran = await conn.gateway.resend(conn.run_id, request_id, text)
            if ran is None:  # another command (the approver's edit is not this one)
                return False
            req, ran_now = ran, True
    except GatewayError:
        return False
    if req.status is Status.STALE and req.superseded_by and req.on_resend:
        await refuse_hold(conn, conn.gateway.get_request(req.superseded_by))
        return True
    if req.status is Status.PENDING:
        await refuse_hold(conn, req)
        return True
    if req.status in (Status.APPROVED, Status.EXECUTING) or (
            req.status is Status.STALE and req.superseded_by):
        await report(conn, await decision(conn, req))
        return True
    if req.status is Status.EXECUTED or (
            ran_now and req.status in (Status.FAILED, Status.AMBIGUOUS)):
        await report(conn, req)
        return True
    return False
