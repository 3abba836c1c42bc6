"""What an emergency stop ends besides the outputs: every pending and approved request on
the stopped instruments is cancelled, every standing plan on them ended, and the runs that
had them suspended (interlocks.py)."""

from __future__ import annotations

from collections.abc import Callable

from .approvals import person
from .core import Core
from .models import Event, EventType, Principal, RunStatus, Status
from .states import Event as Move
from .takeover import Requests

__all__ = ["stand_down", "suspend"]


def stand_down(core: Core, requests: Requests,
               on_stop: list[Callable[[list[str], Principal], set[str]]],
               names: list[str], who: Principal) -> tuple[list[str], list[str]]:
    """Cancel what waits on the stopped instruments, end the plans on them; suspend the
    runs that asked."""
    cancelled: list[str] = []
    runs: set[str] = set()
    for name in names:
        for status in (Status.PENDING, Status.APPROVED):
            for req in core.store.list_requests(status=status, instrument=name,
                                                limit=10_000):
                if req.bench not in ("", core.config.bench):
                    continue
                if requests.move(req, Move.CANCEL, EventType.TAKEOVER_CANCELLED,
                                      {"by": who.name, "reason": "emergency stop"},
                                      outcome=f"cancelled: emergency stop by {who.name}; "
                                              "nothing was written"):
                    cancelled.append(req.id)
                    runs.add(req.run_id)
    for hook in on_stop:  # standing approvals: a plan would run on after a clear
        runs |= hook(names, who)
    suspended = [run_id for run_id in sorted(runs)
                 if suspend(core, run_id, f"suspended by the emergency stop ({who.name})")]
    return cancelled, suspended


def suspend(core: Core, run_id: str, reason: str) -> bool:
    """Suspend ``run_id`` for a stop, if it runs: whether it was."""
    run = core.store.get_run(run_id)
    # A run its own requester took over is suspended too: left taken over, it was
    # theirs to release, and no other person would have looked at it.
    if run is None or not (run.status is RunStatus.ACTIVE or (
            run.status is RunStatus.TAKEN_OVER
            and person(run.takeover_by or "") == person(run.principal))):
        return False
    run.status = RunStatus.SUSPENDED
    run.takeover_reason = reason
    core.store.save_run(run, [Event(run_id=run_id, type=EventType.RUN_SUSPENDED,
                                    data={"reason": reason})])
    core.notifier.publish("run", id=run_id, status=run.status.value)
    return True
