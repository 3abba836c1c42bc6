"""Leases: a lost client never leaves a bench energized unattended.

A run that switched an output on holds a lease on those channels. The lease is renewed by
the client being there: a socket-door connection or an in-process MCP session renews it by
staying connected; an HTTP or MCP-over-HTTP client by any submit, or by
``POST /v1/runs/{id}/heartbeat``. A lease not renewed for ``policy.lease_seconds`` runs
out, and the bench's ``policy.on_client_lost`` decides: ``hold`` keeps the state and
raises an alert; ``safe`` applies the profile's safe action to the channels that run
energized. Either way it is journaled (``lease_expired``) and operators see it live. A long
measurement whose client is still there is never cut off.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from .core import Core, Part, resource_key
from .errors import InstrumentError, StoreError
from .identity import ask
from .instruments import AsyncLink
from .models import Event, EventType, TakeoverRequest
from .safety import send_safe_action

__all__ = ["LEASES", "Leases"]

#: The store's table of leases (instrument and channels per run): they outlive a restart.
LEASES = "leases"


class Leases(Part):
    def __init__(self, core: Core) -> None:
        super().__init__(core)
        #: When each run was last heard from (monotonic seconds). In memory: after a
        #: restart every lease starts a full term again, which never shortens one.
        self._renewed: dict[str, float] = {}
        #: Runs whose client is connected now (a socket-door connection, an MCP session).
        self._connected: set[str] = set()
        #: A lease whose safe action failed: its errors, said once, tried again each sweep.
        self._failing: dict[str, list[str]] = {}
        #: Told each time a run's own client is heard from (its heartbeat term, terms.py).
        self.heard: Callable[[str], None] = lambda run_id: None
        #: Told (instrument, channels) before a lost client's outputs get the safe action:
        #: the standing plans over them end (planning.py), as after a breach made safe.
        self.on_safed: list[Callable[[str, list[int]], None]] = []
        #: The leases as last read from the store: run out from here while it is away (a
        #: safe action never waits for the store).
        self._known: dict[str, dict[str, Any]] | None = None
        #: Leases run out whose end the store has not taken yet (the store away): what was
        #: done and its words, whether journaled and whether told; ended once it is back,
        #: never done or said twice.
        self._ran_out: dict[str, tuple[dict[str, Any], str, list[bool]]] = {}

    def energized(self, req: TakeoverRequest, after: dict[str, str]) -> None:
        """After an executed write: the channels it switched on that read back on."""
        safe = self.core.instrument(req.instrument).profile.safe_action
        if safe is None:
            return
        channels = sorted({a.channel for a in req.actions if a.channel is not None
                           and a.field == safe.field and a.new in ("1", "True")
                           and after.get(f"ch{a.channel}.{safe.field}") == "1"})
        if not channels:
            return
        # Keyed by bench too: a run may energize bench A's psu and bench B's psu through
        # two gateways on one store, and each lease must outlive the other's renewal.
        key = f"{req.run_id}/{self.core.qualified(req.instrument)}"
        held = self.store.kv_get(LEASES, key) or {}
        inst = self.core.instrument(req.instrument)
        # Which instrument it is, beyond its names: bench.toml may rename the bench or the
        # instrument before the lease runs out, and the lease must still find its outputs.
        lease = {"run_id": req.run_id, "instrument": req.instrument,
                 "bench": self.config.bench, "resource": resource_key(inst.config.resource),
                 "idn": inst.idn, "host": self.core.registry.host,
                 "channels": sorted(set(held.get("channels", [])) | set(channels))}
        self.store.kv_put(LEASES, key, lease)
        if self._known is not None:
            self._known[key] = lease
        self.renew(req.run_id, client=False)  # a grant ran it, not its client

    def renew(self, run_id: str, *, client: bool = True) -> None:
        """The run's client (``client``), or an operator for it, says it is there."""
        self._renewed[run_id] = time.monotonic()
        if client:
            self.heard(run_id)

    def connected(self, run_id: str, live: bool) -> None:
        """A door says its client connected (True) or went away (False)."""
        if live:
            self._connected.add(run_id)
        else:
            self._connected.discard(run_id)
        self.renew(run_id)

    def held(self) -> list[dict[str, Any]]:
        """This bench's leases, each with the seconds left."""
        return [lease for _, lease in self._held()]

    def _held(self) -> list[tuple[str, dict[str, Any]]]:
        """This bench's leases, each with its key in the store: those taken here, and those
        taken on one of its instruments under names bench.toml no longer gives (a bench or
        an instrument renamed), named as they are now."""
        term = self.config.policy.lease_seconds
        out = []
        alive: dict[str, bool] = {}
        try:
            self._known = dict(self.store.kv_items(LEASES))
        except StoreError:
            if self._known is None:
                raise
        for key, lease in list(self._known.items()):
            try:
                name = self._mine(lease, alive)
            except StoreError:  # another bench's, whether its gateway is alive unknown now
                continue
            if name is None:
                continue
            run_id = str(lease["run_id"])
            since = time.monotonic() - self._renewed.setdefault(run_id, time.monotonic())
            left = term if run_id in self._connected else max(0.0, term - since)
            out.append((key, {**lease, "instrument": name, "bench": self.config.bench,
                              "seconds_left": round(left, 1),
                              "connected": run_id in self._connected}))
        return out

    def _mine(self, lease: dict[str, Any], alive: dict[str, bool]) -> str | None:
        """The name of this bench's instrument ``lease`` was taken on, or None if it is
        another live bench's. One taken under this bench's name on an instrument it no
        longer has keeps its old name (its safe action cannot be sent: said so)."""
        bench, name = str(lease.get("bench")), str(lease.get("instrument"))
        if bench != self.config.bench:
            if bench not in alive:
                alive[bench] = self.core.registry.alive(bench)
            if alive[bench]:
                return None  # its own gateway runs it out
        if bench == self.config.bench and self._is(name, lease):
            return name  # still its instrument's name (another may name it too)
        if lease.get("resource") is not None or lease.get("idn") is not None:
            same = next((n for n in self.core.instruments if self._is(n, lease)), None)
            if same is not None:
                return same  # renamed, or its name swapped with another's
        return name if bench == self.config.bench else None

    def _is(self, name: str, lease: dict[str, Any]) -> bool:
        """Whether this bench's ``name`` is the instrument ``lease`` was taken on: the same
        resource or ``*IDN?`` (a lease kept before leases named them: its name is all)."""
        inst = self.core.instruments.get(name)
        if inst is None:
            return False
        if lease.get("resource") is None and lease.get("idn") is None:
            return True
        # A resource string names an instrument on its own host: another bench's lease
        # taken on another PC (or on one unknown) is never this one's by it.
        here = lease.get("bench") == self.config.bench or \
            lease.get("host") == self.core.registry.host
        return (here and lease.get("resource") == resource_key(inst.config.resource)) or (
            inst.idn is not None and lease.get("idn") == inst.idn)

    async def sweep(self) -> None:
        """Apply ``on_client_lost`` to every lease that ran out. None on a fenced gateway:
        the clients renew the bench's leases on its new owner now, which runs them out."""
        if self.core.registry.lost is not None:
            return
        for key, lease in self._held():
            if lease["connected"] or lease["seconds_left"] > 0:
                continue
            await self._lost(key, lease)

    async def _lost(self, key: str, lease: dict[str, Any]) -> None:
        policy = self.config.policy
        run_id, name = str(lease["run_id"]), str(lease["instrument"])
        channels = [int(c) for c in lease["channels"]]
        data: dict[str, Any] = {"instrument": name, "channels": channels,
                                "policy": policy.on_client_lost,
                                "lease_seconds": policy.lease_seconds}
        what = ("its outputs were switched off" if policy.on_client_lost == "safe"
                else "its outputs stay as they are (policy hold): check the bench")
        if key in self._ran_out:  # done already: said and ended once the store takes it
            self._end(key, run_id, name, channels)
            return
        reachable = self._is(name, lease) or await self._asked(name, lease)
        if policy.on_client_lost == "safe" and not reachable:
            what = (f"the instrument it was taken on as {name} is not on this bench now "
                    "(bench.toml changed): its outputs could not be switched off; check the "
                    "bench")
        if policy.on_client_lost == "safe" and reachable:
            data.update(await self._make_safe(name, channels))  # first: it waits for nothing
            for hook in self.on_safed:
                hook(name, channels)
            if data["errors"]:
                # Not shown off (a write that failed, an output that still reads on): the
                # lease stays, so the next sweep tries again; said once per failure.
                if self._failing.get(key) != data["errors"]:
                    self._failing[key] = data["errors"]
                    self._announce(run_id, name, channels, data, "the safe action failed ("
                                   + "; ".join(data["errors"]) + "): it is tried again "
                                   "every sweep until the outputs read off; check the bench")
                return
        self._failing.pop(key, None)
        self._ran_out[key] = (data, what, [False, False])
        self._end(key, run_id, name, channels)

    def _end(self, key: str, run_id: str, name: str, channels: list[int]) -> None:
        """Journal a lease run out, then delete it (StoreError: the next sweep goes on)."""
        data, what, said = self._ran_out[key]
        # Journaled before the lease goes: a crash between the two then leaves the lease,
        # run out again after the restart (its safe action sent once more, harmless), never
        # outputs switched off with no word of it in the journal. Told at once, once.
        if not said[1]:
            self._tell(run_id, name, channels, what)
            said[1] = True
        if not said[0]:
            self.store.append([Event(run_id=run_id, type=EventType.LEASE_EXPIRED, data=data)])
            said[0] = True
        self.store.kv_delete(LEASES, key)
        self.store.kv_delete(LEASES, f"{run_id}/{name}")  # as kept before leases named a bench
        self._renewed.pop(run_id, None)
        self._ran_out.pop(key, None)
        if self._known is not None:
            self._known.pop(key, None)

    def _announce(self, run_id: str, name: str, channels: list[int], data: dict[str, Any],
                  what: str) -> None:
        """Tell every console (first: it never waits for the store), then journal."""
        self._tell(run_id, name, channels, what)
        self.store.append([Event(run_id=run_id, type=EventType.LEASE_EXPIRED, data=data)])

    def _tell(self, run_id: str, name: str, channels: list[int], what: str) -> None:
        self.core.notifier.publish(
            "alert", alert="client_lost", run_id=run_id, instrument=name, channels=channels,
            reason=f"the client of {run_id} stopped renewing its lease on {name} "
                   f"CH{', CH'.join(map(str, channels))}; {what}")

    async def _asked(self, name: str, lease: dict[str, Any]) -> bool:
        """Whether ``name`` is the lease's instrument by the ``*IDN?`` it answers now (its
        resource spelled otherwise in bench.toml, and not asked since the start)."""
        inst = self.core.instruments.get(name)
        if inst is None or inst.idn is not None or lease.get("idn") is None:
            return False

        async def job(link: AsyncLink) -> str:
            return await ask(link, name)  # megabytes are no identification

        with contextlib.suppress(InstrumentError):
            inst.idn = await inst.lane.run(job, urgent=True)
        return self._is(name, lease)

    async def _make_safe(self, name: str, channels: list[int]) -> dict[str, Any]:
        inst = self.core.instruments[name]
        safe = inst.profile.safe_action
        assert safe is not None

        async def job(link: AsyncLink) -> dict[str, Any]:
            sent, _, errors = await send_safe_action(link, inst.profile, channels, inst)
            return {"sent": sent, "errors": errors}

        return await inst.lane.run(job, urgent=True)
