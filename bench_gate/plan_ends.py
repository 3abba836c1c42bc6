"""A plan's end, finished whatever cuts it off: the plan is saved revoked with its end kept
in it (``Plan.unfinished``: its ``plan_revoked`` event, whether a stop suspends its run),
then journaled, then its run suspended by the stop (stand_down.py). A crash, or a store
failure, between those leaves a revoked plan with its end unfinished: the restart, or the
next sweep, finishes it from what the run's journal says was done, never twice: the event
once, and a run suspended only if nothing suspended it since the plan's end (an operator
who released it after that stop is never overruled)."""

from __future__ import annotations

import contextlib
from typing import Any

from .core import Core
from .errors import NotFound, TransitionError
from .models import Event, EventType
from .plans import Plan, PlanStatus
from .stand_down import suspend
from .states import PLANS, PlanEvent
from .states import Event as Move
from .takeover import Requests

__all__ = ["close", "end", "settle"]

#: How far back a run's journal is read: the end was cut off right after its event.
LOOK_BACK = 200


def _save(core: Core, plan: Plan) -> None:
    core.store.kv_put("plans", plan.id, plan.model_dump(mode="json"))


def end(core: Core, requests: Requests, plan: Plan, by: str, request_id: str | None,
        data: dict[str, Any], *, stop: bool = False) -> None:
    """Revoke ``plan`` (pending or active) by ``by``: saved with its end kept, journaled,
    told live. A pending plan's request is cancelled with it: approved later, it would
    start and find no plan to activate. By a ``stop``, its end stays unfinished until its
    run's suspension is journaled (:func:`settle`, next sweep)."""
    pending = plan.status is PlanStatus.PENDING
    plan.status = PLANS.move(plan.id, plan.status, PlanEvent.REVOKE)
    plan.revoked_by = by
    plan.unfinished = {"request_id": request_id, "pending": pending, "stop": stop,
                       "data": {"plan_id": plan.id, "by": by, **data}}
    _save(core, plan)  # one commit: revoked and what its end still owes
    core.store.append([Event(run_id=plan.run_id, request_id=request_id,
                             type=EventType.PLAN_REVOKED, data=plan.unfinished["data"])])
    if pending:
        _cancel(requests, plan, by)
    if not stop:
        plan.unfinished = None
        _save(core, plan)
    core.notifier.publish("plan", id=plan.id, run_id=plan.run_id, status=plan.status.value)


def _cancel(requests: Requests, plan: Plan, by: str) -> None:
    with contextlib.suppress(TransitionError, NotFound):  # decided meanwhile
        req = requests.get(plan.request_id)
        requests.move(req, Move.CANCEL, EventType.TAKEOVER_CANCELLED,
                      {"by": by, "reason": "plan revoked"},
                      outcome=f"cancelled: the plan was revoked by {by}")


def settle(core: Core, requests: Requests, plan_ids: set[str] | None = None) -> None:
    """Finish the ends cut off of this bench's plans (``plan_ids``, or every one: at
    start). StoreError: the rest is for the next sweep."""
    for raw in ([core.store.kv_get("plans", i) for i in sorted(plan_ids)]
                if plan_ids is not None else core.store.kv_list("plans")):
        if raw is None or not raw.get("unfinished"):
            continue
        plan = Plan.model_validate(raw)
        if plan.bench in ("", core.config.bench):
            _finish(core, requests, plan)


def _finish(core: Core, requests: Requests, plan: Plan) -> None:
    todo = plan.unfinished or {}
    events = core.store.recent(plan.run_id, limit=LOOK_BACK)
    at = next((i for i in range(len(events) - 1, -1, -1)
               if events[i].type is EventType.PLAN_REVOKED
               and events[i].data.get("plan_id") == plan.id), None)
    if at is None:  # cut off before its event: journaled now, once
        data = {**todo.get("data", {}), "finished": "journaled after a crash or a store "
                "failure cut its end off"}
        core.store.append([Event(run_id=plan.run_id, request_id=todo.get("request_id"),
                                 type=EventType.PLAN_REVOKED, data=data)])
        events, at = [], -1
    if todo.get("pending"):
        _cancel(requests, plan, str(plan.revoked_by))
    # A stop's plan: its run suspended unless something did since the plan's end (the
    # stop, or an operator's later release after it: never overruled).
    if todo.get("stop") and not any(e.type in (EventType.RUN_SUSPENDED,
                                               EventType.TAKEOVER_RELEASED)
                                     for e in events[at + 1:]):
        suspend(core, plan.run_id, f"suspended by {plan.revoked_by}")
    plan.unfinished = None
    _save(core, plan)


def close(core: Core, plan_id: str, event: PlanEvent) -> None:
    """End a pending or active plan by ``event`` (its request ended, it ran out); an ended
    one stays as it is."""
    raw = core.store.kv_get("plans", plan_id)
    if raw is not None:
        plan = Plan.model_validate(raw)
        status = PLANS.target(plan.status, event)
        if status is not None:
            plan.status = status
            _save(core, plan)
