"""The end of a write: its judged read-back (``readback.judge_readback``) becomes the
request's outcome (executed, failed or ambiguous) with its receipt, and an envelope breach
its alert; an executed write's setpoints are remembered and what it switched on is leased.
A write interrupted by a restart is judged the same way from a read-back, never re-sent.
"""

from __future__ import annotations

from typing import Any

from . import envelope
from .core import Core, Instrument, Part
from .errors import WrongInstrument
from .instruments import AsyncLink
from .leases import Leases
from .models import Event, EventType, Receipt, TakeoverRequest
from .readback import Judgement, judge_readback
from .readback import Verdict as Judged
from .safety import Safed, Safety, Written
from .setpoints import Setpoints
from .snapshots import Snapshots, unverifiable
from .states import Event as Move
from .takeover import Requests

__all__ = ["Conclusions"]


class Conclusions(Part):
    def __init__(self, core: Core, snaps: Snapshots, setpoints: Setpoints,
                 requests: Requests, safety: Safety, leases: Leases) -> None:
        super().__init__(core)
        self.snaps = snaps
        self.setpoints = setpoints
        self.requests = requests
        self.safety = safety
        self.leases = leases

    def conclude(self, req: TakeoverRequest, inst: Instrument, receipt: Receipt,
                  judged: Judgement, safed: Safed | None, after: dict[str, str] | None,
                  *, executed: str) -> None:
        """One ending for a write from its judged read-back, with any envelope breach."""
        receipt.reconciled = receipt.reconciled or judged.reconciled
        req.receipt = receipt
        data: dict[str, Any] = {"receipt": receipt.model_dump(mode="json")}
        if judged.unexpected:
            data["unexpected"] = {k: list(v) for k, v in judged.unexpected.items()}
        verdict, text = judged.verdict, judged.detail
        if safed is not None:
            words = envelope.summary(inst.profile, safed.found)
            done = (f"the safe action ({'; '.join(safed.sent)}) ran at once" if safed.error
                    is None else f"the safe action failed ({safed.error})")
            # Told first, then journaled, or kept for when the store is back (later.py):
            # a store down right here never loses the alert, nor the breach's event.
            self.core.notifier.publish(
                "alert", alert="envelope_breach", id=req.id, run_id=req.run_id,
                instrument=req.instrument, reason=f"{words}; {done}")
            self.core.later.journal(Event(
                run_id=req.run_id, request_id=req.id, type=EventType.ENVELOPE_BREACH,
                data={"breaches": [b.as_json() for b in safed.found], "safe_action": safed.sent,
                      "read_back": safed.after, "error": safed.error}))
            mine = {a.channel for a in req.actions} | (
                {b.channel for b in safed.found}
                if any(a.unpredictable or a.channel is None for a in req.actions) else set())
            note = f"envelope breach read back: {words}; {done}"
            if any(b.channel in mine for b in safed.found):
                verdict, text = Judged.AMBIGUOUS, f"{note}; {text}; a person must check the DUT"
            else:
                text = f"{text}; {note}"
        if verdict is Judged.EXECUTED:
            reconciled = " (reconciled from read-back)" if judged.reconciled else ""
            detail = judged.detail if (judged.reconciled or judged.unexpected
                                       or safed is not None) else ""
            outcome = executed.replace("executed", f"executed{reconciled}", 1) + (
                f" ({text})" if detail or safed is not None else "")
            if judged.reconciled:
                data["reconciled"] = True
            if after is not None:
                # The lease first: a crash between two commits must never leave an output
                # on with no lease (a lost client's DUT energized for good); a lease left
                # by a crash before the outcome is a restart's reconciliation's again.
                self.leases.energized(req, after)
            self.requests.move(req, Move.FINISH, EventType.STEP_COMPLETED, data, outcome=outcome)
            if after is not None:
                self.setpoints.remember(req, inst, after)
        elif verdict is Judged.FAILED:
            self.requests.move(req, Move.FAIL, EventType.STEP_FAILED, {**data, "reason": text},
                               outcome=f"failed: {text}")
        else:
            self.requests.move(req, Move.LOSE_TRACK, EventType.STEP_FAILED,
                               {**data, "reason": text},
                               outcome=f"ambiguous: {text}; a person must check the instrument"
                               if "a person must" not in text else f"ambiguous: {text}")


    async def reconcile_interrupted(self, req: TakeoverRequest, by: str = "a restart"
                                    ) -> None:
        """A write was in flight when the gateway stopped (or the store failed its
        outcome's commit: ``by``): read back, never re-send."""
        inst = self.core.instrument(req.instrument)
        limits = self.config.envelope.get(inst.config.name, {})
        fields = list(dict.fromkeys([*self.snaps.fields(inst, req.actions),
                                     *envelope.readable_fields(inst.profile, limits)]))

        async def job(link: AsyncLink) -> Written:
            out = Written()
            # A write cut off by the crash may still be inside the instrument: let it finish
            # before judging, or a late change would be judged "nothing took effect".
            unsettled = await self.safety.settle(link, inst)
            if unsettled is not None:
                out.read_error = unsettled
                return out
            out.after, out.read_error = await self.safety.read_back(link, inst, fields,
                                                                    req.snapshot.idn)
            out.safed = await self.safety.make_safe(link, inst, out.after)
            return out

        try:
            w = await inst.lane.run(job)
        except WrongInstrument as exc:  # its lane's *IDN?: another model, nothing read
            w = Written(read_error=exc.message)
        receipt = Receipt(sent=[], before=req.snapshot.values, after=w.after or {},
                          approvals=req.valid_approvals(), started_at=self.clock(),
                          finished_at=self.clock(), reconciled=True,
                          detail=f"interrupted by {by}; reconciled from read-back")
        judged = judge_readback(
            before=req.snapshot.values,
            expected=self.snaps.proposed(req.actions, req.snapshot, inst.profile),
            after=w.after, unverifiable=unverifiable(req.actions),
            blind=any(a.unpredictable for a in req.actions),
            error=f"interrupted by {by} before its read-back; nothing is re-sent",
            instrument_errors=[], read_error=w.read_error)
        self.conclude(req, inst, receipt, judged, w.safed, w.after,
                       executed=f"executed (reconciled after {by})")
