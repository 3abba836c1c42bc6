"""Per-requester quotas (``[limits]`` in bench.toml): how much one requester may hold at once.

- Pending requests and open runs are counted in the store, so every gateway sharing it
  agrees. The core checks them before any work (``create_run``; ``_hold`` before the
  snapshot), and the store checks a pending request again in the transaction that files it,
  so concurrent submits never overshoot.
- MCP sessions and event streams live in one process: counted here, per gateway, by
  :class:`Lease`.

The roles in ``limits.exempt_roles`` (operators and admins by default: the people who
decide) have no quota. Past a quota the core raises :class:`~bench_gate.errors.QuotaExceeded`,
which every door reports in its own terms (HTTP 429, a -200 SCPI error, an MCP tool error).
"""

from __future__ import annotations

import collections
import enum
import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from .auth import Tokens
from .config import BenchConfig
from .errors import QuotaExceeded
from .models import Principal, Role, Run, RunKind
from .store import Store

__all__ = ["Host", "Lease", "Quota", "check_pending", "check_runs", "lease"]


class Host(Protocol):
    """What the quotas read of the gateway core: its configuration, store and clock."""

    @property
    def config(self) -> BenchConfig: ...
    @property
    def store(self) -> Store: ...
    @property
    def clock(self) -> Callable[[], Any]: ...

#: Names whose role is remembered per gateway; past this the memory starts over.
ROLES_REMEMBERED = 10_000


class Quota(enum.StrEnum):
    """What a quota counts; the value is its key in ``[limits]``."""

    PENDING_REQUESTS = "pending_requests"
    OPEN_RUNS = "open_runs"
    MCP_SESSIONS = "mcp_sessions"
    SSE_STREAMS = "sse_streams"


_HELD = {
    Quota.PENDING_REQUESTS: "requests waiting for a decision",
    Quota.OPEN_RUNS: "open runs",
    Quota.MCP_SESSIONS: "MCP sessions open",
    Quota.SSE_STREAMS: "event streams open",
}
_REMEDY = {
    Quota.PENDING_REQUESTS: "nothing was held or sent; wait for decisions, or withdraw "
                            "requests you no longer need",
    Quota.OPEN_RUNS: "close runs you no longer need (POST /v1/runs/{id}/close; a socket-door "
                     "connection's or MCP session's run closes with it)",
    Quota.MCP_SESSIONS: "end a session you no longer need (DELETE /mcp with its "
                        "Mcp-Session-Id), or let an idle one time out",
    Quota.SSE_STREAMS: "close a stream you no longer read",
}


def _exceeded(quota: Quota, name: str, held: int, limit: int,
              retry_after: float | None = None) -> QuotaExceeded:
    when = ""
    if retry_after is not None:
        when = f"; the soonest of them expires in {math.ceil(retry_after)} s"
    return QuotaExceeded(
        f"{name} has {held} {_HELD[quota]}, the most one requester may have "
        f"(limits.{quota.value} = {limit}): {_REMEDY[quota]}{when}",
        quota=quota.value, limit=limit, retry_after=retry_after)


@dataclass(eq=False)
class _Usage:
    """One gateway's view: who has which role, and the in-process leases held."""

    gateway: weakref.ReferenceType[Host]
    roles: dict[str, Role] = field(default_factory=dict)
    held: collections.Counter[tuple[Quota, str]] = field(default_factory=collections.Counter)


_USAGE: weakref.WeakKeyDictionary[Host, _Usage] = weakref.WeakKeyDictionary()


def _usage(gateway: Host) -> _Usage:
    usage = _USAGE.get(gateway)
    if usage is None:
        usage = _USAGE[gateway] = _Usage(weakref.ref(gateway))
        gateway.store.pending_check = _store_check(usage)
    return usage


def _remember(usage: _Usage, principal: Principal) -> None:
    if len(usage.roles) >= ROLES_REMEMBERED:
        usage.roles.clear()
    usage.roles[principal.name] = principal.role


def _limit(gateway: Host, quota: Quota, role: Role) -> int | None:
    """The quota for someone of ``role``; None for an exempt role."""
    limits = gateway.config.limits
    if role.value in limits.exempt_roles:
        return None
    value: int = getattr(limits, quota.value)
    return value


def _seconds_until(gateway: Host, when: datetime | None) -> float | None:
    if when is None:
        return None
    return max(0.0, float((when - gateway.clock()).total_seconds()))


def check_runs(gateway: Host, principal: Principal) -> None:
    """Before a new run: ``principal`` may have ``limits.open_runs`` runs not closed."""
    usage = _usage(gateway)
    _remember(usage, principal)
    limit = _limit(gateway, Quota.OPEN_RUNS, principal.role)
    if limit is None:
        return
    held = gateway.store.open_runs_of(principal.name)
    if held >= limit:
        raise _exceeded(Quota.OPEN_RUNS, principal.name, held, limit)


def _role(gateway: Host, usage: _Usage, run: Run) -> Role:
    role = usage.roles.get(run.principal)
    if role is None:
        if run.kind is RunKind.ENGINEER:  # engineer runs are operators' own
            role = Role.OPERATOR
        else:  # a run made before a restart: its maker's tokens say
            role = Tokens(gateway.store).role_of(run.principal) or Role.REQUESTER
        _remember(usage, Principal(name=run.principal, role=role))
    return role


def check_pending(gateway: Host, run: Run) -> None:
    """Before a write is held (and before its snapshot is read): the run's requester may
    have ``limits.pending_requests`` requests waiting. The store checks again, atomically,
    when it files the request."""
    usage = _usage(gateway)
    limit = _limit(gateway, Quota.PENDING_REQUESTS, _role(gateway, usage, run))
    if limit is None:
        return
    held, soonest = gateway.store.pending_of(run.principal)
    if held >= limit:
        raise _exceeded(Quota.PENDING_REQUESTS, run.principal, held, limit,
                        _seconds_until(gateway, soonest))


def _store_check(usage: _Usage) -> Callable[[str, Callable[[], tuple[int, datetime | None]]],
                                            None]:
    """The store's ``pending_check``: the same rule, inside the transaction that files the
    request. It holds the gateway weakly: the store may outlive it."""

    def check(name: str, count: Callable[[], tuple[int, datetime | None]]) -> None:
        gateway = usage.gateway()
        if gateway is None:
            return
        limit = _limit(gateway, Quota.PENDING_REQUESTS,
                       usage.roles.get(name, Role.REQUESTER))
        if limit is None:
            return
        held, soonest = count()
        if held >= limit:
            raise _exceeded(Quota.PENDING_REQUESTS, name, held, limit,
                            _seconds_until(gateway, soonest))
    return check


class Lease:
    """One MCP session or event stream held by a requester; :meth:`release` (idempotent)
    gives it back. A lease of an exempt role counts nothing."""

    def __init__(self, usage: _Usage | None, key: tuple[Quota, str]) -> None:
        self._usage = usage
        self._key = key

    def release(self) -> None:
        usage, self._usage = self._usage, None
        if usage is not None:
            usage.held[self._key] -= 1
            if usage.held[self._key] <= 0:
                del usage.held[self._key]

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lease(gateway: Host, principal: Principal, quota: Quota) -> Lease:
    """Take one of ``principal``'s ``quota`` (MCP sessions, event streams), or raise
    QuotaExceeded when it holds them all already."""
    usage = _usage(gateway)
    _remember(usage, principal)
    key = (quota, principal.name)
    limit = _limit(gateway, quota, principal.role)
    if limit is None:
        return Lease(None, key)
    if usage.held[key] >= limit:
        raise _exceeded(quota, principal.name, usage.held[key], limit)
    usage.held[key] += 1
    return Lease(usage, key)
