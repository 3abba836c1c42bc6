"""Leases over HTTP: a client that switched an output on says it is still there."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ..wire import wire
from ._deps import NO_BODY, Caller, GatewayDep, Operator

__all__ = ["router"]

router = APIRouter(tags=["bench"])


@router.post("/v1/runs/{run_id}/heartbeat", dependencies=NO_BODY, responses={
    409: {"description": "the run is closed (its reason says why): nothing is renewed"}})
def heartbeat(run_id: str, who: Caller, gw: GatewayDep) -> dict[str, Any]:
    """Renew the run's leases and its heartbeat term: a run that energized an output must be
    heard from at least every ``policy.lease_seconds`` (any submit counts too), or
    ``on_client_lost`` applies; a run created with ``heartbeatSeconds`` closes when its own
    client is silent that long (an operator's heartbeat renews the leases only)."""
    beat: dict[str, Any] = wire(gw.heartbeat(run_id, who))
    return beat


@router.get("/v1/bench/leases")
def leases(who: Operator, gw: GatewayDep) -> list[dict[str, Any]]:
    """Every lease on an energized channel of this bench, with the seconds left."""
    return [wire(lease) for lease in gw.leases()]
