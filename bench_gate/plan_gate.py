"""The confidence gate on an agent's write inside a plan: scored against the run's goal
and recent trajectory, journaled either way, and diverted to a person below its threshold
(docs/confidence.md). A plan is a standing approval; this is the agent's own doubt."""

from __future__ import annotations

from typing import Any

from .calibration import Calibration
from .confidence import apply_env, score, threshold_for
from .config import ConfidenceConfig
from .models import Action, Event, EventType, Run, RunKind
from .store import Store

__all__ = ["divert"]


async def divert(config: ConfidenceConfig, calibration: Calibration, store: Store, run: Run,
                 actions: list[Action], message: str, unjournaled: list[Event], *,
                 rationale: str | None, confidence: float | None, step_id: str | None,
                 plan_id: str) -> dict[str, Any] | None:
    """Why the gate sends this write to a person, or None to run it in the plan. The
    evaluation is journaled with ``unjournaled`` (emptied) whenever the gate is on."""
    gate = apply_env(config)
    if run.kind is not RunKind.AGENT or not gate.enabled:
        return None
    kinds = sorted({a.approval.value for a in actions if a.approval is not None})
    threshold = max((threshold_for(gate, k) for k in kinds), default=gate.threshold)
    trajectory = [str(e.data.get("message")) for e in store.recent(run.id, 20)
                  if e.type is EventType.COMMAND_RECEIVED]
    regret = calibration.regret(",".join(kinds)) if gate.calibrate else 0.0
    scored = await score(gate, stated=confidence, rationale=rationale, action=message,
                         goal=run.goal, trajectory=trajectory, regret=regret)
    below = scored.value < threshold
    store.append([*unjournaled, Event(
        run_id=run.id, type=EventType.CONFIDENCE_EVALUATED,
        data={"score": round(scored.value, 4), "threshold": round(threshold, 4),
              "decision": "divert" if below else "execute", "effect": kinds,
              "estimator": scored.estimator, "note": scored.note,
              "regret": regret, "step_id": step_id, "message": message})])
    unjournaled.clear()
    if not below:
        return None
    return {"reason": f"confidence {scored.value:.2f} < {threshold:.2f}",
            "score": scored.value, "threshold": threshold,
            "estimator": scored.estimator, "note": scored.note, "plan_id": plan_id}
