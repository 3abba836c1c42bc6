"""The emergency stop: one action that makes the whole bench (or one instrument) safe at
once, through every door, needing no approval (safe actions never wait).

It applies each instrument's profile safe action to every channel, jumping the lane's queue
(a write in progress stops before its next unit); cancels every pending and approved request
on those instruments and ends every standing plan on them (stand_down.py); suspends the
active runs that had them; and journals who pressed it, through which door, and what each
instrument read back. Until an operator clears it, every write to a stopped instrument is
refused (-203), across a restart too (kept in the store). A stop a crash cut off is finished
by the restart before anything else reaches the instrument (``finish_cut_off``), and what
the journal says a stop or a clear did is never done twice (stop_journal.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from .approvals import require_operator
from .auth import refuse_revoked
from .core import Core, Part
from .core import resource_key as _resource
from .errors import Refused, StoreError, TransitionError
from .models import Event, EventType, Principal
from .runs import Runs
from .safety import stop_outputs
from .scpi import Classification
from .stand_down import stand_down
from .stop_journal import cut_off
from .stop_names import allowed, follow_names, same, stop_of
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
        #: Stops in force in this process that the store does not hold yet (being written,
        #: or the store failed): a safe action never waits for the store, and nothing
        #: energizes through this gateway meanwhile. Qualified name -> who stopped it.
        self._held: dict[str, dict[str, Any]] = {}
        #: Instruments whose stand-down (cancelling, ending plans) the store refused: done
        #: again before the stop can be cleared, so nothing approved before it runs after.
        self._unfinished: set[str] = set()
        #: Stops the store refused part of when pressed (kept, stood down, journaled): each
        #: (names, who, its event if not journaled yet), finished by a sweep once the store
        #: is back; until then kept unfinished (STOPPING) too, for a restart to finish.
        self._to_finish: list[tuple[list[str], Principal, dict[str, Any] | None]] = []
        #: This bench's instruments under a stop now, known without asking the store (kept
        #: at once by a stop and a clear, and from the store each sweep): the watch holds
        #: each one's outputs off (holding.py) and never waits for the store to know.
        self.in_force: set[str] = set()
        self._changes = 0  # a stop or clear since a sweep began reading the store
        #: Stopped instruments whose outputs no read-back has shown off yet (the stop's
        #: safe action failed): why. Tried again every watch period (holding.py).
        self.unproven: dict[str, str] = {}
        #: Stops whose safe action has not come back yet: not shown off either.
        self._sending: set[str] = set()
        #: Told at start (True) and each sweep (False) to finish what a crash or the store
        #: cut off of a stand-down: a plan's end and its run's suspension (plan_ends.py).
        self.unsettled: list[Callable[[bool], None]] = []

    def _bench_run(self) -> str:
        """The journal key of bench-wide events (no requester's run)."""
        return f"bench:{self.config.bench}"

    def stopped(self) -> dict[str, dict[str, Any]]:
        """The instruments of this bench that are stopped now, with who stopped them (and
        why not every output is shown off yet, while one is not)."""
        mine = f"{self.config.bench}/"
        held = {k: v for k, v in self._held.items() if k.startswith(mine)}
        try:
            held.update(self.store.kv_items(STOPS))
        except StoreError:
            if not held:
                raise
        found = {k[len(mine):]: v for k, v in held.items() if k.startswith(mine)}
        why = {**dict.fromkeys(self._sending, "the stop's safe action has not finished"),
               **self.unproven}
        return {n: {**v, "not_shown_off": why[n]} if n in why else v for n, v in found.items()}

    allowed = staticmethod(allowed)  # what a stopped instrument still takes (stop_names.py)

    def same(self, name: str) -> list[str]:
        """``name`` and the bench's other names for the same instrument (stop_names.py)."""
        return same(self.core, name)

    def _stop_of(self, instrument: str) -> tuple[str, dict[str, Any]] | None:
        return stop_of(self.core, self._held, STOPS, instrument)

    def follow_names(self) -> None:
        """At start: a stop kept under a name bench.toml now gives another instrument moves
        to its instrument's name (stop_names.py)."""
        follow_names(self.core, (STOPS, STOPPING))

    def check_write(self, instrument: str, c: Classification | None) -> None:
        """:meth:`check`, for a message with a unit a stopped instrument does not take, or
        (None) a standing plan: writes that would run unattended once the stop is cleared."""
        if c is None or not all(self.allowed(u) for u in c.units):
            self.check(instrument)

    def check(self, instrument: str) -> None:
        """Refuse a write to a stopped instrument (-203, with who stopped it), under any
        of its names, on any bench of the store; and every write once another gateway took
        this one's bench over (federation.Registry.beat)."""
        if self.core.registry.lost is not None:
            raise Refused(-203, self.core.registry.lost)
        found = self._stop_of(instrument)
        if found is None:
            return
        name, stop = found
        if name != instrument:
            instrument = f"{instrument} ({name}, the same instrument)"
        if stop.get("why"):
            raise Refused(-203, f"{instrument} is stopped ({stop['why']}): nothing is "
                                "written until an operator clears the stop")
        raise Refused(-203, f"{instrument} is stopped (emergency stop by {stop['by']} "
                            f"through the {stop['door']} at {stop['at']}): nothing is "
                            "written until an operator clears the stop")

    async def stop(self, who: Principal, door: str, instrument: str | None = None
                   ) -> dict[str, Any]:
        """Make every channel of ``instrument`` (or of every instrument) safe at once."""
        names = self.same(self.core.instrument(instrument).config.name) if instrument \
            else list(self.core.instruments)
        return await self._stop(who, door, names, self.clock().isoformat())

    async def _stop(self, who: Principal, door: str, names: list[str], at: str,
                    resumed: bool = False) -> dict[str, Any]:
        started = time.perf_counter()
        # Which instrument each is, for the other benches on the store: they refuse it too.
        records = {n: {"by": who.name, "door": door, "at": at,
                       "resource": _resource(self.core.instruments[n].config.resource),
                       "idn": self.core.instruments[n].idn,
                       "host": self.core.registry.host} for n in names}
        for name in names:  # first, so nothing new gets through while the stop runs
            self._held[self.core.qualified(name)] = records[name]
            self.core.instruments[name].lane.halted = True
        self.in_force.update(names)
        self._sending.update(names)  # not shown off until read back: a clear says so
        self._changes += 1
        # The safe actions start now; the store keeps the stop (for a restart, and the
        # other gateways) on a worker thread meanwhile: a slow or locked store never holds
        # an output on, and the stop stays in force here until it is kept or cleared.
        making = [asyncio.ensure_future(stop_outputs(self.core.instruments[n]))
                  for n in names]
        keeping = asyncio.ensure_future(asyncio.to_thread(self._keep, self._keyed(records)))
        results = await asyncio.gather(*making)
        reached = {n: r for n, r in zip(names, results, strict=True)}
        for name, result in reached.items():  # sent is not done: tried until shown off
            self._sending.discard(name)
            self.unproven.pop(name, None)
            if result["errors"] and name not in self.in_force:  # cleared: nothing holds it
                result["retry"] = ("not every output is shown off, and the stop was cleared "
                                   "before its safe action was done: check the bench")
            elif result["errors"]:
                self.unproven[name] = "; ".join(result["errors"])
                result["retry"] = ("not every output is shown off: the safe action is tried "
                                   "again every watch period until each reads off")
        seconds = time.perf_counter() - started
        store_error = await keeping
        for name in sorted(set(names) - self.in_force):  # cleared meanwhile: the record
            with contextlib.suppress(StoreError):  # kept since is no stop (none re-kept)
                for table in (STOPS, STOPPING):
                    self.store.kv_delete(table, self.core.qualified(name))
        for name, record in records.items():  # kept with the stop: a restart says it too
            if name in self.unproven:
                record["not_shown_off"] = self.unproven[name]
        learnt = {n: r for n, r in records.items()  # the stop read who answers
                  if n in self.in_force and (r["idn"] != self.core.instruments[n].idn
                                             or "not_shown_off" in r)}
        for name, record in learnt.items():
            record["idn"] = self.core.instruments[name].idn
        if store_error is None and learnt:
            store_error = await asyncio.to_thread(self._keep, self._keyed(learnt))
        if store_error is None:  # the store holds it now: it is the store's to clear
            for name in names:
                if self._held.get(self.core.qualified(name)) is records[name]:
                    del self._held[self.core.qualified(name)]
        data: dict[str, Any] = {"by": who.name, "door": door, "at": at,
                                "instruments": reached, "cancelled": [], "suspended": [],
                                "seconds": round(seconds, 4)}
        if resumed:
            data["resumed"] = (f"pressed at {at}, cut off by a crash before it was done; "
                               "finished by the restart")
        try:
            data["cancelled"], data["suspended"] = self._stand_down(names, who)
            self._unfinished.difference_update(names)
        except StoreError as exc:
            self._unfinished.update(names)
            store_error = store_error or exc.message
        if store_error is not None:
            data["store_error"] = (f"{store_error}: the stop is in force on this gateway, "
                                   "but it may not be kept across a restart")
        journaled = False
        try:
            self.store.append([Event(run_id=self._bench_run(),
                                     type=EventType.EMERGENCY_STOP, data=data)])
            journaled = True
            if "store_error" not in data:  # done: nothing for a restart to finish
                for name in names:
                    self.store.kv_delete(STOPPING, self.core.qualified(name))
        except StoreError as exc:
            data.setdefault("store_error", f"{exc.message}: the stop was not journaled")
        if "store_error" in data:  # the sweeps finish it once the store is back
            self._to_finish.append((names, who, None if journaled else dict(data)))
        self.core.notifier.publish("alert", alert="emergency_stop", by=who.name, door=door,
                                   instruments=names)
        return data

    async def refresh(self) -> None:
        """Each sweep, and at start: which instruments are stopped, from the store too (a
        restart, another bench's stop of the same instrument, a clear elsewhere). A stop or
        clear here while the store was read wins: it is newer."""
        changes = self._changes
        try:
            found = await asyncio.to_thread(lambda: {
                n: s for n in self.core.instruments if (s := self._stop_of(n)) is not None})
        except StoreError:
            return  # kept as it was: the next sweep reads again
        if changes != self._changes:
            return
        new = sorted(set(found) - self.in_force)
        self.in_force = set(found)
        for name, (_, stop) in found.items():  # never shown off, as the stop kept it
            if stop.get("not_shown_off") and name not in self.unproven:
                self.unproven[name] = str(stop["not_shown_off"])
        for name in new:  # pressed elsewhere (another bench of the store): what waits here
            who = Principal(name=str(found[name][1].get("by") or "the gateway"))
            self._to_finish.append(([name], who, None))  # on it ends too, as by the stop
            self._unfinished.add(name)
        if new:
            self._finish()

    def _keyed(self, by_name: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {self.core.qualified(n): r for n, r in by_name.items()}

    def _keep(self, records: dict[str, dict[str, Any]],
              tables: tuple[str, ...] = (STOPPING, STOPS)) -> str | None:
        """Keep the stops (by qualified name) in ``tables`` of the store, on a worker
        thread; why not, if not. A stop is unfinished (STOPPING) until journaled: a crash."""
        try:
            for key, record in records.items():
                for table in tables:
                    self.store.kv_put(table, key, record)
        except StoreError as exc:
            return exc.message
        return None

    async def keep_held(self) -> None:
        """Each sweep: the stops held here alone (the store refused them when pressed) are
        kept in the store once it is back, so a restart and the other benches of the store
        see them too; a stop cleared meanwhile is deleted again."""
        held = dict(self._held)
        # A stop not finished is kept unfinished too: a restart then finishes it.
        open_ = {self.core.qualified(n) for names, _, _ in self._to_finish for n in names}
        for tables, records in (((STOPPING, STOPS), {k: r for k, r in held.items()
                                                     if k in open_}),
                                ((STOPS,), {k: r for k, r in held.items() if k not in open_})):
            if records and await asyncio.to_thread(self._keep, records, tables) is not None:
                return
        self._finish()
        with contextlib.suppress(StoreError):  # a plan's end the store cut off: next sweep
            for settle in self.unsettled:
                settle(False)
        for key, record in held.items():
            if self._held.get(key) is record:
                del self._held[key]
            elif key not in self._held:  # cleared while it was being kept
                with contextlib.suppress(StoreError):
                    await asyncio.to_thread(self.store.kv_delete, STOPS, key)

    def _finish(self) -> None:
        """What a stop could not do in the store when pressed is done once it is back (its
        stand-down, its journal event), then its unfinished record goes: not left for a
        clear, a restart forgot it."""
        while self._to_finish:
            names, who, data = self._to_finish[0]
            try:
                todo = sorted(self._unfinished.intersection(names))
                if todo:
                    self._stand_down(todo, who)
                    self._unfinished.difference_update(todo)
                if data is not None:
                    data["finished"] = "its stand-down and this event once the store was back"
                    self.store.append([Event(run_id=self._bench_run(),
                                             type=EventType.EMERGENCY_STOP, data=data)])
                for name in names:
                    self.store.kv_delete(STOPPING, self.core.qualified(name))
            except StoreError:
                return  # the next sweep tries again
            self._to_finish.pop(0)

    def or_held(self, hook: Callable[[str, list[int]], None]
                ) -> Callable[[str, list[int]], None]:
        """``hook`` (ending the plans over channels the gateway just made safe), or, when
        the store refuses it, the instrument held stopped on this gateway until an operator
        clears it: a plan that could not be ended never switches anything on again."""
        def ended_or_held(name: str, channels: list[int]) -> None:
            if name in self._unfinished:  # held already: its plans end before a clear
                return
            try:
                for each in self.same(name):  # its other names: the same channels' plans
                    hook(each, channels)
            except StoreError as exc:
                chs = ", ".join(f"CH{c}" for c in channels)
                why = (f"the gateway made {name} {chs} safe but could not end the plans "
                       f"over them: {exc.message}")
                self._held[self.core.qualified(name)] = {
                    "by": "the gateway", "door": "gateway", "why": why,
                    "at": self.clock().isoformat()}
                self._unfinished.add(name)
                self.in_force.add(name)
                self._changes += 1
                self.core.notifier.publish("alert", alert="emergency_stop", by="the gateway",
                                           door="gateway", instruments=[name], reason=why)
        return ended_or_held

    async def finish_cut_off(self) -> list[dict[str, Any]]:
        """At start, before anything else reaches an instrument: a stop of this bench a
        crash cut off before its journal event (its safe action, stand-down unsure) runs
        again from the start, in the name of who pressed it."""
        for settle in self.unsettled:  # a stand-down cut off: its plans' ends finished
            settle(True)
        cut = cut_off(self.core, STOPS, STOPPING)  # what the journal says done is not
        return [await self._stop(Principal(name=by), door, names, at, resumed=True)
                for (by, door, at), names in cut.items()]

    def _stand_down(self, names: list[str], who: Principal) -> tuple[list[str], list[str]]:
        return stand_down(self.core, self.requests, self.on_stop, names, who)

    def clear(self, who: Principal, instrument: str | None = None) -> list[str]:
        """An operator ends the stop (suspended runs stay suspended until released)."""
        require_operator(who)
        refuse_revoked(self.store, who)
        if self.core.registry.lost is not None:  # the bench's stops are its new owner's
            raise Refused(-203, self.core.registry.lost)
        stopped = self.stopped()
        names = [instrument] if instrument else list(stopped)
        if instrument and instrument not in stopped:
            raise TransitionError(instrument, "running", "clear the stop of",
                                  "it is not stopped")
        self._finish()  # a stop's own stand-down first (StoreError: nothing is cleared)
        if self._to_finish:
            raise StoreError("the store refused to finish the stop's stand-down: "
                             "nothing was cleared; try again")
        unfinished = sorted(self._unfinished.intersection(names))
        if unfinished:  # what the stop could not cancel or end is never run after it
            self._stand_down(unfinished, who)
            self._unfinished.difference_update(unfinished)
        # Cleared is not shown off: an output no read-back showed off is said so.
        unshown = {n: stopped[n]["not_shown_off"] for n in names
                   if "not_shown_off" in stopped.get(n, {})}
        data: dict[str, Any] = {"by": who.name, "instruments": names, "stops": {
            n: stopped[n].get("at") for n in names if n in stopped}}
        if unshown:
            data["not_shown_off"] = unshown
        # Journaled first: a crash before the deletes leaves the stop in the store, and the
        # restart finishes the clear it finds journaled (stop_journal.py).
        self.store.append([Event(run_id=self._bench_run(), type=EventType.STOP_CLEARED,
                                 data=data)])
        for name in names:
            # Unfinished first: a crash between leaves it stopped, never a stop re-run.
            self.store.kv_delete(STOPPING, self.core.qualified(name))
            self.store.kv_delete(STOPS, self.core.qualified(name))
            self._held.pop(self.core.qualified(name), None)
            self.in_force.discard(name)
            self.unproven.pop(name, None)
        self._changes += 1
        self.core.notifier.publish(
            "alert", alert="stop_cleared", by=who.name, instruments=names,
            **({"reason": "stop cleared, but not every output was shown off: " + "; ".join(
                f"{n}: {why}" for n, why in unshown.items()) + "; check the bench"}
               if unshown else {}))
        return names
