"""What the bench console asks of the core beyond requests: an engineer's own run (reused
while it is active), an engineer's panel change rendered through the instrument's profile
(the console never writes SCPI itself), and the record of what each reviewer was shown,
kept beside the journal for a run's timeline.
"""

from __future__ import annotations

from typing import Any

from .core import Core, Part
from .errors import InvalidInput, NotFound
from .models import Principal, RunKind, RunStatus, TakeoverRequest, now
from .runs import Runs
from .scpi import Effect, Profile, canonical_header

__all__ = ["ENGINEER_RUNS", "SHOWN_TABLE", "Engineers", "panel_message"]

#: What the console showed to whom (the store's key-value table).
SHOWN_TABLE = "console_shown"
#: Each engineer's console run.
ENGINEER_RUNS = "console_engineer_runs"


def _setter(profile: Profile, field: str, effect: Effect) -> str:
    """The canonical header that sets ``field`` on a channel list (``VOLT``, ``OUTP``)."""
    for command in profile.model.commands:
        form = command.set
        if form is not None and form.effect is effect and form.field == field \
                and form.channel == "list":
            return form.canonical or canonical_header(command)
    raise InvalidInput(f"{profile.name} has no command that sets {field} on one channel",
                       field=field)


def panel_message(profile: Profile, channel: int, setpoints: dict[str, str],
                  output: bool | None) -> str:
    """An engineer's panel change as one program message: each setpoint given, then the
    output, each unit rendered through the profile (``VOLT 5,(@1);:OUTP ON,(@1)``)."""
    if channel not in profile.channels:
        raise NotFound(f"{profile.name} has no channel {channel}")
    units = [f"{_setter(profile, field, Effect.SETPOINT)} {value},(@{channel})"
             for field, value in setpoints.items()]
    if output is not None:
        units.append(f"{_setter(profile, 'output', Effect.OUTPUT)} "
                     f"{'ON' if output else 'OFF'},(@{channel})")
    if not units:
        raise InvalidInput("nothing to change: give a setpoint or the output")
    return ";:".join(units)


class Engineers(Part):
    def __init__(self, core: Core, runs: Runs) -> None:
        super().__init__(core)
        self.runs = runs

    def run_of(self, who: Principal) -> str:
        """This engineer's console run: reused while active, else a new one (an engineer
        run is an operator's: a requester's is refused)."""
        record = self.store.kv_get(ENGINEER_RUNS, who.name)
        if record is not None:
            run = self.store.get_run(str(record["run_id"]))
            if run is not None and run.status is RunStatus.ACTIVE:
                return run.id
        run = self.runs.create(who, RunKind.ENGINEER,
                               goal=f"{who.name}'s changes from the bench console")
        self.store.kv_put(ENGINEER_RUNS, who.name, {"run_id": run.id})
        return run.id

    def note_shown(self, req: TakeoverRequest, who: Principal, action: str,
                   live: dict[str, str] | None, summary: str, key: str | None = None) -> None:
        """What a reviewer was shown (and did), beside the journal."""
        at = now().isoformat()
        self.store.kv_put(SHOWN_TABLE, key or f"{req.id}/{at}/{who.name}/{action}", {
            "request_id": req.id, "run_id": req.run_id, "who": who.name, "action": action,
            "at": at, "proposal_hash": req.proposal_hash, "live": live or {},
            "summary": summary})

    def shown(self, run_id: str) -> list[dict[str, Any]]:
        return [v for v in self.store.kv_list(SHOWN_TABLE) if v.get("run_id") == run_id]
