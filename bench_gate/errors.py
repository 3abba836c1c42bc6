"""The gateway's one exceptions tree. Third-party errors (pyvisa, sqlite3) are translated
into these at one boundary each, with ``raise ... from exc``.

    GatewayError
    ├── NotFound               (no such run, request, instrument)
    ├── InvalidInput           (a bad argument: unknown kind, bad edit, bad timeout)
    │   └── IdempotencyKeyReused (an Idempotency-Key sent again with another request)
    ├── Refused                (the message is refused outright: bad SCPI, forbidden, envelope)
    │   └── scpi.ScpiError     (the SCPI itself: -100..-199 syntax, -200..-299 execution)
    ├── PermissionDenied       (self-approval, wrong person, two-person rule)
    ├── QuotaExceeded          (one requester holds as many of something as it may)
    ├── TransitionError        (a status change that is not allowed or lost a race)
    │   └── ProposalChanged    (a decision names a proposal that is no longer current)
    ├── InstrumentError        (I/O with the instrument failed)
    │   └── WrongInstrument    (another instrument answers *IDN? than its profile describes)
    ├── BenchTaken             (another live gateway serves this bench name)
    └── StoreError             (the store could not be read or written)
"""

from __future__ import annotations

import re

from .texts import redact

__all__ = [
    "BenchTaken",
    "GatewayError",
    "IdempotencyKeyReused",
    "InstrumentError",
    "InvalidInput",
    "NotFound",
    "PermissionDenied",
    "ProposalChanged",
    "QuotaExceeded",
    "Refused",
    "StoreError",
    "TransitionError",
    "WrongInstrument",
    "shown_as_hash",
]


class GatewayError(Exception):
    """Base of every error the gateway core raises. Its message never carries a token: a
    token pasted where an id goes (``bench-gate show bg_…``, ``/requests/bg_…``) came back
    whole in "no request 'bg_…'" on every door, into terminals, pages and logs."""

    def __init__(self, message: str) -> None:
        message = redact(message) or message
        self.message = message
        super().__init__(message)


class NotFound(GatewayError):
    """The run, request or instrument named does not exist."""


class InvalidInput(GatewayError):
    """An argument is not acceptable; the message says which and why."""

    def __init__(self, message: str, field: str | None = None) -> None:
        #: The argument at fault (``voltage``, ``current_max``...), when there is one.
        self.field = field
        super().__init__(message)


class IdempotencyKeyReused(InvalidInput):
    """An idempotency key names an earlier request of the run that differs from this one
    (another command, instrument, rationale...): a retry must repeat its request exactly.
    ``differences`` names the fields that differ, never their values."""

    def __init__(self, key: str, request_id: str, differences: list[str]) -> None:
        self.key = key
        self.request_id = request_id
        self.differences = differences
        super().__init__(
            f"this Idempotency-Key was used for {request_id}, which differs from this request "
            f"in {', '.join(differences)}; a retry repeats its request exactly, and a new "
            "request needs a new key")


class Refused(GatewayError):
    """A message is refused outright, with its SCPI error number (-203, -222, -102...)."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)

    @property
    def scpi(self) -> str:
        return f'{self.code},"' + self.message.replace('"', '""') + '"'


class PermissionDenied(GatewayError):
    """The caller may not do this (self-approval, two-person rule, wrong role)."""


class QuotaExceeded(GatewayError):
    """One requester already holds as many of something (pending requests, open runs, MCP
    sessions, event streams) as ``[limits]`` allows it. Carries which quota (its bench.toml
    key), the limit, and when a slot frees at the latest (seconds), when that is known."""

    def __init__(self, message: str, *, quota: str, limit: int,
                 retry_after: float | None = None) -> None:
        self.quota = quota
        self.limit = limit
        self.retry_after = retry_after
        super().__init__(message)


class TransitionError(GatewayError):
    """A request cannot move from its status by this event (or another caller moved it first)."""

    def __init__(self, request_id: str, status: str, event: str, detail: str = "") -> None:
        self.request_id = request_id
        self.status = status
        self.event = event
        text = f"cannot {event} {request_id}: it is {status}"
        super().__init__(text + (f" ({detail})" if detail else ""))


#: What a proposal hash looks like (models.proposal_hash: sha256, hexadecimal).
_HASH = re.compile(r"[0-9A-Fa-f]{1,128}")


def shown_as_hash(value: str | None) -> bool:
    """Whether a value a client sent as a proposal hash may be shown back to it: only a
    hexadecimal one. Anything else (a token pasted into proposalHash or If-Match) is never
    repeated, whole or clipped: a clip is too short for ``texts.redact`` to know."""
    return value is not None and _HASH.fullmatch(value) is not None


class ProposalChanged(TransitionError):
    """A grant or denial names a proposal hash that is not the request's current one: the
    approver decided on something else. Carries the current hash so a door can show it."""

    def __init__(self, request_id: str, status: str, event: str, seen: str, current: str
                 ) -> None:
        #: What the decision named, as a door may show it back: a proposal hash, or ""
        #: for anything else (a token pasted there is never echoed, not even clipped).
        self.seen = seen if shown_as_hash(seen) else ""
        self.current = current
        named = self.seen[:12] if self.seen else ("(none)" if not seen else
                                                   "something that is not a proposal hash")
        super().__init__(request_id, status, event)
        # Its status is no reason: the proposal is ("cannot grant tk-…: it is pending" read
        # as if pending were what stood in the way).
        GatewayError.__init__(self, f"cannot {event} {request_id}: you were shown proposal "
                                    f"{named}, but the current one is {current[:12]}; "
                                    "review it again")


class InstrumentError(GatewayError):
    """Talking to an instrument failed (timeout, lost connection, garbled reply)."""


class NotSent(InstrumentError):
    """The command was refused before any of it left: a new connection where the turn keeps
    to one (socket_link.kept_to)."""


class WrongInstrument(InstrumentError):
    """The instrument answering ``*IDN?`` is not one its profile describes (bench.toml
    points the profile at another model, a swapped cable): nothing but ``*IDN?`` is sent
    to it (identity.py). ``expected`` lists the profile's identities, ``actual`` is what
    answered."""

    def __init__(self, instrument: str, profile: str, expected: tuple[str, ...],
                 actual: str) -> None:
        self.instrument = instrument
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"{instrument}: another instrument answered *IDN?: {actual!r}, but its profile "
            f"{profile} describes {' or '.join(repr(e) for e in expected)}; nothing is sent "
            "to it until the instrument or bench.toml is corrected")


class BenchTaken(GatewayError):
    """Another live gateway already serves this bench name on the shared store."""


class StoreError(GatewayError):
    """The store could not be read or written."""
