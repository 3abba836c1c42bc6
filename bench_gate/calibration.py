"""Calibrating the confidence gate: people's feedback on unattended steps, and the share
of a kind of step that turned out wrong (regret). Only people who may judge teach it.
"""

from __future__ import annotations

from typing import Any

from .approvals import person
from .auth import refuse_token
from .core import Core, Part
from .errors import GatewayError, InvalidInput
from .models import Event, EventType, Principal, Status, TakeoverRequest
from .runs import Runs
from .states import TERMINAL
from .takeover import Requests

__all__ = ["Calibration"]


class Calibration(Part):
    def __init__(self, core: Core, requests: Requests, runs: Runs) -> None:
        super().__init__(core)
        self.runs = runs
        requests.listeners.append(self.on_move)

    def feedback(self, run_id: str, step_id: str, score_value: int, notes: str = "",
                 who: Principal | None = None) -> dict[str, Any]:
        """Feedback on an unattended step (1-5); 2 or less counts as regret.

        Kept per (step, person) with the person's role, so nobody's feedback overwrites
        another's. Only people who may judge (operators, admins) teach the calibration: a
        requester's feedback (or an unauthenticated caller's) is journaled, and changes
        nothing (``calibrates`` says which)."""
        self.runs.get(run_id)
        if not 1 <= score_value <= 5:
            raise InvalidInput(f"feedback score must be 1 to 5, not {score_value}")
        refuse_token(step_id, "step_id")
        refuse_token(notes, "notes")
        role = who.role if who is not None else None
        calibrates = who is not None and who.operates
        record = {"run_id": run_id, "step_id": step_id, "score": score_value, "notes": notes,
                  "by": who.name if who else None, "role": role.value if role else None,
                  "calibrates": calibrates, "at": self.clock().isoformat()}
        by = person(who.name) if who is not None else ""
        self.store.kv_put("feedback", f"{run_id}/{step_id}/{role or 'nobody'}/{by}", record)
        self.store.append([Event(run_id=run_id, type=EventType.FEEDBACK_GIVEN, data=record)])
        return record

    def regret(self, effect: str) -> float:
        """Share of unattended steps of this kind that failed, or that someone who may
        judge (an operator or admin) scored 2 or less. One judge's low score counts
        whatever others said; a requester's feedback never counts, so an agent cannot
        talk its own regret down. A record from before roles were kept counts only as
        regret (it may have been the requester's, which could only have been praise)."""
        try:
            steps = [s for s in self.store.kv_list("auto_steps") if s.get("effect") == effect
                     and s.get("outcome") is not None]
            if len(steps) < 3:
                return 0.0
            regretted: set[str] = set()
            for f in self.store.kv_list("feedback"):
                try:
                    low = int(f["score"]) <= 2
                    judged = f.get("calibrates") is True or "role" not in f
                    if low and judged:
                        regretted.add(f"{f['run_id']}/{f['step_id']}")
                except (KeyError, TypeError, ValueError):
                    continue  # one malformed record never hides the others
            bad = sum(1 for step in steps if step.get("outcome") in ("failed", "ambiguous")
                      or f"{step.get('run_id')}/{step.get('step_id')}" in regretted)
            return bad / len(steps)
        except GatewayError:
            return 0.0  # calibration never blocks a decision on its own store error


    def on_move(self, req: TakeoverRequest, dst: Status) -> None:
        """An unattended step's outcome, for the regret of its kind."""
        if req.handoff.get("auto_step") and dst in TERMINAL:
            record = self.store.kv_get("auto_steps", req.id)
            if record is not None:
                record["outcome"] = dst.value
                self.store.kv_put("auto_steps", req.id, record)
