"""A request the executor will not write: sent back ``stale`` for fresh review when the
instrument changed since approval (with a fresh request on the live state, when the
envelope allows one), else expired or failed with the recheck's reason. Nothing is written.
"""

from __future__ import annotations

from .core import MAX_RETRIES, Core, Instrument, Part
from .errors import InstrumentError, Refused
from .models import ApprovalKind, Event, EventType, TakeoverRequest
from .policy import required_for
from .rechecks import Refusal
from .runs import Runs
from .scpi import as_exciting, measures_now
from .snapshots import Snapshots
from .states import Event as Move
from .takeover import Requests

__all__ = ["Stale"]


class Stale(Part):
    def __init__(self, core: Core, snaps: Snapshots, requests: Requests, runs: Runs) -> None:
        super().__init__(core)
        self.snaps = snaps
        self.requests = requests
        self.runs = runs

    async def record(self, why: Refusal, req: TakeoverRequest, inst: Instrument) -> None:
        """The live recheck's refusal: the request goes stale (with a fresh one), expires,
        or fails."""
        if why.move is Move.GO_STALE:
            await self.go_stale(req, inst, why.diff)
        elif why.move is Move.EXPIRE:
            self.requests.move(req, Move.EXPIRE, EventType.TAKEOVER_EXPIRED,
                               {"expires_at": req.expires_at.isoformat(),
                                "reason": why.reason}, outcome=why.outcome)
        else:
            self.requests.move(req, why.move, EventType.STEP_FAILED, {"reason": why.reason},
                               outcome=why.outcome)


    async def go_stale(self, req: TakeoverRequest, inst: Instrument,
                        diff: dict[str, tuple[str | None, str | None]],
                        excites: str | None = None) -> TakeoverRequest:
        run = self.runs.get(req.run_id)
        shown = {k: {"shown": v[0], "live": v[1]} for k, v in diff.items()}
        summary = ", ".join(f"{k} {v[0]} → {v[1]}" for k, v in diff.items())
        if not self.requests.move(
                req, Move.GO_STALE, EventType.TAKEOVER_STALE, {"diff": shown},
                outcome=f"stale: the instrument changed since approval ({summary}); nothing "
                        "was written, sent back for fresh review"):
            return self.requests.get(req.id)
        c = self.snaps.same_units(inst, req)
        # A reading the approver saw as exciting, or found exciting at the write, stays so:
        # its canonical text alone reclassifies as a plain reading (scpi/_excitation.py).
        applies = excites or next((a.applies for a in req.actions
                                   if a.effect == "excites" and a.applies
                                   and measures_now(inst.profile, a.canonical)), None)
        if applies:
            c = as_exciting(c, applies)
        fresh_required = list(required_for([a.approval for a in req.actions],
                                           any(a.unpredictable for a in req.actions))
                              ) or [ApprovalKind.STATE]
        try:
            fresh = await self.requests.hold(
                run, inst, req.message, c, fresh_required, reason=req.reason,
                rationale=req.rationale, confidence=req.confidence, step_id=req.step_id,
                idempotency_key=None, timeout=req.timeout_minutes, events=[], supersedes=req,
                stale_diff=diff, on_resend=req.on_resend)
        except (Refused, InstrumentError) as exc:
            # No fresh request: on the live state it would leave the envelope (or the
            # instrument cannot be read). The stale one says why, and nothing runs.
            self.store.append([Event(run_id=req.run_id, request_id=req.id,
                                     type=EventType.WRITE_REFUSED,
                                     data={"message": req.message, "reason": exc.message,
                                           "code": getattr(exc, "code", -240)})])
            return self.requests.get(req.id)
        for _ in range(MAX_RETRIES):
            current = self.requests.get(req.id)
            current.superseded_by = fresh.id
            if self.store.save_request(current, current.version, []):
                self.core.notifier.request_changed(current)
                return current
        return self.requests.get(req.id)

