"""Standing plans of a run, and feedback on its unattended steps (``docs/plans.md``).

A plan request is an ordinary takeover request: it is decided through the run's
``takeover/{tkId}/grant`` and ``deny``, like a held write.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from starlette.exceptions import HTTPException

from ..doorway import UNDECIDED, follow
from ..plans import Plan
from ..wire import wire
from ._deps import NO_BODY, Caller, GatewayDep, Operator, own_run, wait_seconds
from ._runs import WaitQuery
from ._schemas import (
    FeedbackBody,
    PlanCreate,
    PlanOut,
    PlanRequested,
    plan_out,
    takeover_out,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1/runs", tags=["plans"])


def _plan_of(gw: GatewayDep, run_id: str, plan_id: str) -> Plan:
    plan = gw.get_plan(plan_id)
    if plan.run_id != run_id:
        raise HTTPException(404, f"{plan_id} is not a plan of {run_id}")
    return plan


@router.post("/{run_id}/plans", response_model=PlanRequested, status_code=202,
             responses={200: {"model": PlanRequested, "description": "decided within ?wait="},
                        422: {"description": "the scope is invalid or outside the envelope"}})
async def request_plan(run_id: str, body: PlanCreate, who: Caller, gw: GatewayDep,
                       response: Response, wait: WaitQuery = None) -> PlanRequested:
    """Ask for a standing plan: held for its approvals (202) like a write."""
    own_run(gw, run_id, who)
    gw.owned_run(who, run_id, "asks for a plan")
    req = await gw.request_plan(run_id, body.scope(), body.rationale)
    seconds = wait_seconds(wait)
    if seconds:
        req = await follow(gw, req, seconds)
    if req.status not in UNDECIDED:
        response.status_code = 200
    assert req.plan_id is not None
    return PlanRequested(status=req.status, takeover=takeover_out(req, handoff=True),
                         plan=plan_out(gw.get_plan(req.plan_id)))


@router.get("/{run_id}/plans", response_model=list[PlanOut])
async def list_plans(run_id: str, who: Caller, gw: GatewayDep) -> list[PlanOut]:
    """The run's plans, oldest first, each with its status and writes left."""
    own_run(gw, run_id, who)
    return [plan_out(p) for p in gw.list_plans(run_id)]


@router.get("/{run_id}/plans/{plan_id}", response_model=PlanOut)
async def get_plan(run_id: str, plan_id: str, who: Caller, gw: GatewayDep) -> PlanOut:
    own_run(gw, run_id, who)
    return plan_out(_plan_of(gw, run_id, plan_id))


@router.post("/{run_id}/plans/{plan_id}/revoke", response_model=PlanOut,
             dependencies=NO_BODY)
async def revoke_plan(run_id: str, plan_id: str, who: Operator, gw: GatewayDep) -> PlanOut:
    """End a plan now (pending or active): the run's next write is held."""
    _plan_of(gw, run_id, plan_id)
    return plan_out(gw.revoke_plan(plan_id, who))


@router.post("/{run_id}/feedback")
async def feedback(run_id: str, body: FeedbackBody, who: Caller, gw: GatewayDep) -> dict[str, Any]:
    """Score an unattended step 1 to 5; 2 or less counts as regret for calibration.

    Kept per (step, person). Only an operator's or admin's feedback calibrates
    (``calibrates``); a requester's is journaled and changes nothing."""
    own_run(gw, run_id, who)
    record = gw.feedback(run_id, body.step_id, body.score, body.notes, who)
    return {"runId": record["run_id"], "stepId": record["step_id"], "score": record["score"],
            "notes": record["notes"], "by": record["by"], "role": record["role"],
            "calibrates": record["calibrates"], "at": wire(record["at"])}
