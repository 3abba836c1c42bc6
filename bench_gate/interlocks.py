"""The emergency stop: one action that makes the whole bench (or one instrument) safe at
once, through every door, needing no approval (safe actions never wait).

It applies each instrument's profile safe action to every channel, jumping the lane's
queue (a write in progress stops before its next unit); cancels every pending and approved
request on those instruments and ends every standing plan on them; suspends the active
runs that had them; and journals who
pressed it, through which door, and what each instrument read back afterwards. Until an
operator clears it, every write to a stopped instrument is refused (-203), across a
restart too (the stop is kept in the store). A stop a crash cut off (recorded, but its safe
action, stand-down or journal event not done) is finished by the restart, before anything
else reaches the instrument (``finish_cut_off``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from .approvals import require_operator
from .auth import refuse_revoked
from .core import Core, Instrument, Part
from .errors import Refused, TransitionError
from .instruments import AsyncLink
from .models import Event, EventType, Principal, RunStatus, Status
from .runs import Runs
from .safety import send_safe_action
from .scpi import Unit
from .states import Event as Move
from .takeover import Requests

__all__ = ["Interlocks"]

#: The store's table of stopped instruments (so a restart stays stopped).
STOPS = "stops"
#: Stops recorded and not yet finished (safe action, stand-down, journal event): a record
#: left here by a crash is a stop the restart must finish.
STOPPING = "stops_unfinished"


class Interlocks(Part):
    def __init__(self, core: Core, requests: Requests, runs: Runs) -> None:
        super().__init__(core)
        self.requests = requests
        self.runs = runs
        #: Told of each stop (the instruments stopped, who stopped them) after what waited
        #: is cancelled; each returns the runs whose approvals in force it ended (a plan),
        #: suspended with the runs whose requests were cancelled.
        self.on_stop: list[Callable[[list[str], Principal], set[str]]] = []

    def _bench_run(self) -> str:
        """The journal key of bench-wide events (no requester's run)."""
        return f"bench:{self.config.bench}"

    def stopped(self) -> dict[str, dict[str, Any]]:
        """The instruments of this bench that are stopped now, with who stopped them."""
        return {k.split("/", 1)[1]: v for k, v in self.store.kv_items(STOPS)
                if k.startswith(f"{self.config.bench}/")}

    @staticmethod
    def allowed(unit: Unit) -> bool:
        """What a stopped instrument still takes: reads, selections, status commands, a
        meter's passive settings, and switching an output off. Nothing that can energize."""
        if unit.effect.value in ("read", "select", "harmless", "measure-config"):
            return True
        return unit.effect.value == "output" and unit.value is False

    def check(self, instrument: str) -> None:
        """Refuse a write to a stopped instrument (-203, with who stopped it), and every
        write once another gateway took this one's bench over (federation.Registry.beat)."""
        if self.core.registry.lost is not None:
            raise Refused(-203, self.core.registry.lost)
        stop = self.store.kv_get(STOPS, self.core.qualified(instrument))
        if stop is not None:
            raise Refused(-203, f"{instrument} is stopped (emergency stop by {stop['by']} "
                                f"through the {stop['door']} at {stop['at']}): nothing is "
                                "written until an operator clears the stop")

    async def stop(self, who: Principal, door: str, instrument: str | None = None
                   ) -> dict[str, Any]:
        """Make every channel of ``instrument`` (or of every instrument) safe at once."""
        names = [self.core.instrument(instrument).config.name] if instrument else \
            list(self.core.instruments)
        return await self._stop(who, door, names, self.clock().isoformat())

    async def _stop(self, who: Principal, door: str, names: list[str], at: str,
                    resumed: bool = False) -> dict[str, Any]:
        started = time.perf_counter()
        for name in names:  # first, so nothing new gets through while the stop runs
            record = {"by": who.name, "door": door, "at": at}
            self.store.kv_put(STOPPING, self.core.qualified(name), record)
            self.store.kv_put(STOPS, self.core.qualified(name), record)
            self.core.instruments[name].lane.halted = True
        results = await asyncio.gather(*[self._make_safe(self.core.instruments[n])
                                         for n in names])
        reached = {n: r for n, r in zip(names, results, strict=True)}
        seconds = time.perf_counter() - started
        cancelled, suspended = self._stand_down(names, who)
        data: dict[str, Any] = {"by": who.name, "door": door, "instruments": reached,
                                "cancelled": cancelled, "suspended": suspended,
                                "seconds": round(seconds, 4)}
        if resumed:
            data["resumed"] = (f"pressed at {at}, cut off by a crash before it was done; "
                               "finished by the restart")
        self.store.append([Event(run_id=self._bench_run(), type=EventType.EMERGENCY_STOP,
                                 data=data)])
        for name in names:
            self.store.kv_delete(STOPPING, self.core.qualified(name))
        self.core.notifier.publish("alert", alert="emergency_stop", by=who.name, door=door,
                                   instruments=names)
        return data

    async def finish_cut_off(self) -> list[dict[str, Any]]:
        """At start, before anything else reaches an instrument: a stop of this bench that
        a crash cut off (recorded first, so the store says stopped, but its safe action may
        never have reached the instrument, what waited is not cancelled and nothing is
        journaled) runs again from the start, in the name of who pressed it."""
        cut: dict[tuple[str, str, str], list[str]] = {}
        for key, record in self.store.kv_items(STOPPING):
            bench, _, name = key.partition("/")
            if bench != self.config.bench:
                continue
            if name not in self.core.instruments:  # no longer on this bench
                self.store.kv_delete(STOPPING, key)
                continue
            group = (str(record.get("by", "")), str(record.get("door", "")),
                     str(record.get("at", "")))
            cut.setdefault(group, []).append(name)
        return [await self._stop(Principal(name=by), door, names, at, resumed=True)
                for (by, door, at), names in cut.items()]

    async def _make_safe(self, inst: Instrument) -> dict[str, Any]:
        profile = inst.profile
        safe = profile.safe_action
        channels = list(profile.channels)

        async def job(link: AsyncLink) -> dict[str, Any]:
            if safe is None:
                return {"sent": [], "read_back": {}, "errors": [],
                        "note": "this instrument has no safe action in its profile"}
            sent, read_back, errors = await send_safe_action(link, profile, channels)
            return {"sent": sent, "read_back": read_back, "errors": errors}

        try:
            return await inst.lane.run(job, urgent=True)
        finally:
            inst.lane.halted = False

    def _stand_down(self, names: list[str], who: Principal) -> tuple[list[str], list[str]]:
        """Cancel what waits on the stopped instruments, end the plans on them; suspend the
        runs that asked."""
        cancelled: list[str] = []
        runs: set[str] = set()
        for name in names:
            for status in (Status.PENDING, Status.APPROVED):
                for req in self.store.list_requests(status=status, instrument=name,
                                                    limit=10_000):
                    if req.bench not in ("", self.config.bench):
                        continue
                    if self.requests.move(req, Move.CANCEL, EventType.TAKEOVER_CANCELLED,
                                          {"by": who.name, "reason": "emergency stop"},
                                          outcome=f"cancelled: emergency stop by {who.name}; "
                                                  "nothing was written"):
                        cancelled.append(req.id)
                        runs.add(req.run_id)
        for hook in self.on_stop:  # standing approvals: a plan would run on after a clear
            runs |= hook(names, who)
        suspended = []
        for run_id in sorted(runs):
            run = self.store.get_run(run_id)
            if run is None or run.status is not RunStatus.ACTIVE:
                continue
            run.status = RunStatus.SUSPENDED
            run.takeover_reason = f"suspended by the emergency stop ({who.name})"
            self.store.save_run(run, [Event(run_id=run_id, type=EventType.RUN_SUSPENDED,
                                            data={"reason": run.takeover_reason})])
            self.core.notifier.publish("run", id=run_id, status=run.status.value)
            suspended.append(run_id)
        return cancelled, suspended

    def clear(self, who: Principal, instrument: str | None = None) -> list[str]:
        """An operator ends the stop (suspended runs stay suspended until released)."""
        require_operator(who)
        refuse_revoked(self.store, who)
        stopped = self.stopped()
        names = [instrument] if instrument else list(stopped)
        if instrument and instrument not in stopped:
            raise TransitionError(instrument, "running", "clear the stop of",
                                  "it is not stopped")
        for name in names:
            self.store.kv_delete(STOPS, self.core.qualified(name))
        self.store.append([Event(run_id=self._bench_run(), type=EventType.STOP_CLEARED,
                                 data={"by": who.name, "instruments": names})])
        self.core.notifier.publish("alert", alert="stop_cleared", by=who.name,
                                   instruments=names)
        return names
