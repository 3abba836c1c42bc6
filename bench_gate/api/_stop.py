"""The emergency stop over HTTP: anyone signed in may press it (a safe action never waits
for a person); only an operator clears it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import Field

from ..wire import wire
from ._deps import Caller, GatewayDep, Operator, Presser
from ._schemas import _Camel

__all__ = ["router"]

router = APIRouter(prefix="/v1/bench/stop", tags=["bench"])


class StopBody(_Camel):
    #: One instrument, or every instrument of the bench when left out.
    instrument: str | None = Field(default=None, max_length=64)


@router.post("")
async def stop(who: Presser, gw: GatewayDep, body: StopBody | None = None) -> dict[str, Any]:
    """Press the emergency stop: every channel's safe action at once, every pending and
    approved request on those instruments cancelled, their runs suspended; every write
    refused until an operator clears it. Needs no approval."""
    done: dict[str, Any] = wire(await gw.emergency_stop(who, "HTTP API",
                                                        body.instrument if body else None))
    for name, result in done.get("instruments", {}).items():
        if isinstance(result, dict):
            result["resource"] = _configured(gw, name)
    return done


def _configured(gw: Any, name: str) -> str | None:
    """The instrument's resource as bench.toml spells it (``TCPIP0::…``), never the key a
    stop is matched by (``TCPIP::…``, interlocks.py)."""
    ic = gw.config.instrument(name)
    return str(ic.resource) if ic is not None else None


@router.get("")
def stopped(who: Caller, gw: GatewayDep) -> dict[str, Any]:
    """Which instruments are stopped now, by whom, when and through which door; each
    with its resource as bench.toml says it."""
    found: dict[str, Any] = wire(gw.stopped())
    for name, record in found.items():
        if isinstance(record, dict) and _configured(gw, name) is not None:
            record["resource"] = _configured(gw, name)
    return {"stopped": found}


@router.post("/clear")
def clear(who: Operator, gw: GatewayDep, body: StopBody | None = None) -> dict[str, Any]:
    """An operator ends the stop (suspended runs stay suspended until released)."""
    return {"cleared": gw.clear_stop(who, body.instrument if body else None)}
