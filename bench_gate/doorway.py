"""The one door path: what every door (the HTTP API, MCP, the socket door, the console and
the CLI) does with a message, a wait and an error, written once.

- :func:`submit`: a message through the gateway; the result, or :class:`~.errors.Refused`.
- :func:`follow`: wait for a decision, following a stale request to the fresh one that
  replaced it; :func:`follow_remote` does the same over the HTTP API (the CLI, the client).
- :func:`answer`: what the instrument answered, only if the request executed.
- :data:`ERRORS`: the one table from an error to its problem kind, HTTP status, SCPI error
  number and CLI exit code; :data:`EXIT_CODES`: the CLI's exit code for each outcome.

A door turns its protocol into these calls and the gateway's façade, and does nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import errors as e
from .errors import GatewayError, Refused
from .models import Status, TakeoverRequest
from .states import UNDECIDED, Outcome

if TYPE_CHECKING:
    from .gateway import Gateway
    from .intake import SubmitResult

__all__ = [
    "CHANGED_EXIT",
    "ERRORS",
    "ERROR_EXIT",
    "EXIT_CODES",
    "UNDECIDED",
    "Problem",
    "answer",
    "exit_code",
    "follow",
    "follow_remote",
    "problem_named",
    "problem_of",
    "scpi_code",
    "settled",
    "submit",
    "tool_kind",
]

#: How long one wait on the gateway lasts before a follower looks again (and at ``until``).
WAIT_SLICE = 5.0
#: Any failure the CLI reports in one line.
ERROR_EXIT = 1
#: ``approve``/``deny``: the proposal changed since it was shown; nothing was decided.
CHANGED_EXIT = 9


@dataclass(frozen=True, slots=True)
class Problem:
    """How every door reports one kind of error."""

    #: The problem type (``https://bench-gate.dev/problems/<kind>`` over HTTP).
    kind: str
    http: int
    #: The socket door's error number (a :class:`Refused` carries its own).
    scpi: int
    #: The CLI's exit code.
    exit: int

    @property
    def tool_kind(self) -> str:
        """The same kind as an MCP tool error names it (``not_found``)."""
        return self.kind.replace("-", "_")


#: Error → how doors report it. The first row the error is an instance of is its row, so a
#: subclass comes before its base.
ERRORS: tuple[tuple[type[GatewayError], Problem], ...] = (
    (e.NotFound, Problem("not-found", 404, -200, ERROR_EXIT)),
    (e.IdempotencyKeyReused, Problem("idempotency_key_reused", 422, -200, ERROR_EXIT)),
    (e.InvalidInput, Problem("invalid-input", 422, -200, ERROR_EXIT)),
    (e.Refused, Problem("refused", 422, -203, ERROR_EXIT)),
    (e.PermissionDenied, Problem("forbidden", 403, -200, ERROR_EXIT)),
    (e.QuotaExceeded, Problem("quota-exceeded", 429, -200, ERROR_EXIT)),
    (e.ProposalChanged, Problem("proposal-changed", 409, -200, CHANGED_EXIT)),
    (e.TransitionError, Problem("conflict", 409, -200, ERROR_EXIT)),
    # -241 "Hardware missing": the instrument the profile describes is not the one there.
    (e.WrongInstrument, Problem("wrong-instrument", 502, -241, ERROR_EXIT)),
    (e.InstrumentError, Problem("instrument-error", 502, -240, ERROR_EXIT)),
    (e.StoreError, Problem("store-error", 503, -200, ERROR_EXIT)),
    (e.GatewayError, Problem("gateway-error", 500, -200, ERROR_EXIT)),
)
_BY_KIND = {problem.kind: problem for _, problem in ERRORS}

#: ``bench-gate wait``'s exit code for each outcome (an undecided one is 8: still waiting).
EXIT_CODES: dict[str, int] = {
    Outcome.EXECUTED: 0, Outcome.DENIED: 3, Outcome.EXPIRED: 4, Outcome.STALE: 5,
    Outcome.FAILED: 6, Outcome.AMBIGUOUS: 6, Outcome.CANCELLED: 7,
    Outcome.PENDING: 8, Outcome.APPROVED: 8, Outcome.EXECUTING: 8,
}


def problem_of(exc: GatewayError) -> Problem:
    """The row of ``exc`` in :data:`ERRORS`."""
    return next(problem for cls, problem in ERRORS if isinstance(exc, cls))


def problem_named(kind: str) -> Problem | None:
    """The row whose kind is ``kind`` (as a problem type or an MCP tool error names it)."""
    return _BY_KIND.get(kind) or _BY_KIND.get(kind.replace("_", "-"))


def tool_kind(problem_type: str, status: int) -> str:
    """An HTTP problem as an MCP tool error names it: by its type when the type is a row of
    :data:`ERRORS`, else by its status (the HTTP door's own problems: no token, a wrong
    role, a body that is not JSON; 0: the server could not be reached)."""
    row = problem_named(problem_type.rpartition("/")[2])
    if row is None:
        if status == 0:
            return "unavailable"
        if status == 401:
            return "unauthorized"
        if status in (400, 428):
            return "invalid_input"
        row = next((p for _, p in reversed(ERRORS) if p.http == status), None)
    return row.tool_kind if row is not None else "gateway_error"


def scpi_code(exc: GatewayError) -> int:
    """The socket door's error number for ``exc``: a refusal's own, else its row's."""
    return exc.code if isinstance(exc, Refused) else problem_of(exc).scpi


def exit_code(status: str) -> int:
    """``bench-gate wait``'s exit code for a request's status."""
    return EXIT_CODES.get(status, ERROR_EXIT)


# ------------------------------------------------------------------------- submit
async def submit(gateway: Gateway, run_id: str, instrument: str, message: str, *,
                 rationale: str | None = None, confidence: float | None = None,
                 step_id: str | None = None, idempotency_key: str | None = None,
                 timeout_minutes: int | None = None, on_resend: bool = False
                 ) -> SubmitResult:
    """Submit a message: its result (executed, held, or the status an idempotent retry's
    request ended in), or :class:`Refused` with the SCPI error number (already journaled).
    ``on_resend``: a held write runs when its requester resends it, not when approved."""
    result = await gateway.submit(run_id, instrument, message, rationale=rationale,
                                  confidence=confidence, step_id=step_id,
                                  idempotency_key=idempotency_key,
                                  timeout_minutes=timeout_minutes, on_resend=on_resend)
    if result.status is Outcome.REFUSED:
        raise Refused(result.code, result.reason)
    return result


def answer(req: TakeoverRequest) -> str | None:
    """What the instrument answered, only if the request executed (else None)."""
    if req.status is Status.EXECUTED and req.receipt is not None:
        return req.receipt.detail or None
    return None


# ------------------------------------------------------------------------- follow
def settled(status: str, superseded_by: str | None) -> bool:
    """Decided, and not a stale request that names the fresh one replacing it."""
    return status not in UNDECIDED and not (status == Status.STALE and superseded_by)


async def follow(gateway: Gateway, request: TakeoverRequest | str, timeout: float | None,
                 *, until: asyncio.Event | None = None,
                 seen: Callable[[TakeoverRequest], None] | None = None) -> TakeoverRequest:
    """Wait up to ``timeout`` seconds (None: until it is decided) for a request's decision,
    holding no thread, and follow a stale request to its fresh one. ``until`` ends the wait
    early (the client went away); ``seen`` is told of each request read on the way."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + max(0.0, timeout)
    req = gateway.get_request(request) if isinstance(request, str) else request
    gone = None if until is None else asyncio.ensure_future(until.wait())
    try:
        while not settled(req.status, req.superseded_by):
            if until is not None and until.is_set():
                return req
            left = WAIT_SLICE if deadline is None else min(WAIT_SLICE, deadline - loop.time())
            if left <= 0:
                return req
            waiter = asyncio.ensure_future(gateway.wait(req.id, left))
            await asyncio.wait({waiter} if gone is None else {waiter, gone},
                               return_when=asyncio.FIRST_COMPLETED)
            if not waiter.done():
                waiter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiter
                continue
            req = waiter.result()
            if seen is not None:
                seen(req)
        return req
    finally:
        if gone is not None:
            gone.cancel()


def follow_remote(get: Callable[[str, float], dict[str, Any]], request_id: str,
                  timeout: float | None, *, poll: float = 60.0,
                  on_stale: Callable[[dict[str, Any]], None] | None = None,
                  on_wait: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """:func:`follow` over the HTTP API: ``get(request_id, wait)`` long-polls one request
    (``GET /v1/takeover/{id}?wait=``) for at most ``poll`` seconds a call. ``on_stale`` is
    told of a stale request before its successor is followed, ``on_wait`` of each request
    still undecided."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic()))
        tk = get(request_id, left)
        request_id = tk["id"]
        if tk["status"] == Status.STALE and tk.get("supersededBy"):
            if on_stale is not None:
                on_stale(tk)
            request_id = tk["supersededBy"]
            continue
        if tk["status"] not in UNDECIDED or (
                deadline is not None and time.monotonic() >= deadline):
            return tk
        if on_wait is not None:
            on_wait(tk)
