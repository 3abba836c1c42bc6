"""The gateway's lifecycle: ``start`` (claim the bench name, recover from the store), the one
sweeper (expiry, the bench claim's beat, leases, the envelope watch, approved requests,
journal retention, instrument locks), notifications from other gateways on a shared store,
and ``close``. The façade (gateway.py) wires the parts and delegates here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from .core import Core, Instrument, Part
from .decisions import Decisions
from .errors import GatewayError
from .executor import Executor
from .intake import Intake
from .journal import Retention
from .leases import Leases
from .locking import keep_locks, take_locks
from .models import EventType, Status
from .questions import QuestionDesk
from .runs import Runs
from .states import Event as Move
from .terms import Terms
from .watch import Watch
from .wire import rfc3339

__all__ = ["SWEEP_SECONDS", "Lifecycle"]

#: How often the sweeper expires requests, renews the bench claim and picks up approvals.
SWEEP_SECONDS = 0.5


class Lifecycle(Part):
    """Start, the sweeper, remote changes and close, over the parts the façade wired."""

    def __init__(self, core: Core, questions: QuestionDesk, runs: Runs, terms: Terms,
                 leases: Leases, watch: Watch, executor: Executor, decisions: Decisions,
                 intake: Intake) -> None:
        super().__init__(core)
        self.instruments: dict[str, Instrument] = core.instruments
        self.registry = core.registry
        self.questions = questions
        self.watch = watch
        self._runs = runs
        self._terms = terms
        self._leases = leases
        self._executor = executor
        self._decisions = decisions
        self._intake = intake
        #: [journal] keep_days: old events archived to segment files, off the hot path.
        self._retention = Retention(core.store, core.config.journal,
                                    clock=lambda: self.clock())
        self._sweeper: asyncio.Task[None] | None = None
        self._guard: asyncio.Task[None] | None = None
        self._beat: asyncio.Future[None] | None = None
        self._told_lost = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unlisten: Callable[[], None] | None = None

    async def start(self) -> None:
        """Claim the bench name, recover from the store, then run the one sweeper."""
        self._loop = asyncio.get_running_loop()
        self.registry.claim()
        self._intake.open_reads()  # a crash's reads first: before anything else is journaled
        await take_locks([inst.lane for inst in self.instruments.values()])
        self._executor.interlocks.follow_names()  # bench.toml may have renamed them
        await self._executor.interlocks.finish_cut_off()  # a stop a crash cut off: safe first
        await self._executor.interlocks.refresh()  # a stop kept across the restart holds
        self._runs.close_gone_clients()
        # The leases known from the start: one taken before the first lease sweep (an
        # approved request run below) runs out from memory if the store goes away.
        self._leases.held()
        self._terms.start()  # every term starts again now: being down is no silence
        self._over_policy()
        await self.sweep()
        for req in self.store.list_requests(status=Status.EXECUTING, limit=10_000):
            if self.core.owns(req):
                await self._executor.reconcile_interrupted(req)
        await self._executor.run_approved()
        # Other gateways on a shared store tell us of changes (PostgreSQL LISTEN/NOTIFY).
        self._unlisten = self.store.listen(self._on_remote)
        self._sweeper = asyncio.create_task(self._sweep_forever())
        self._guard = asyncio.create_task(self._guard_forever())

    def _over_policy(self) -> None:
        """At start: a request of this bench still waiting (pending, or approved and not
        started) that was let wait longer than the policy allows now (bench.toml lowered
        ``max_timeout_minutes`` since) expires, whatever its own expiry says: no approval
        counts past the bench's own limit. Its run is not counted against for it."""
        minutes = self.config.policy.max_timeout_minutes
        most = timedelta(minutes=minutes)
        for status in (Status.PENDING, Status.APPROVED):
            for req in self.store.list_requests(status=status, limit=10_000):
                if not self.core.owns(req) or req.expires_at - req.created_at <= most:
                    continue
                why = (f"it was let wait until {rfc3339(req.expires_at)}, longer than "
                       f"policy.max_timeout_minutes = {minutes} "
                       "allows now")
                self._decisions.requests.move(
                    req, Move.EXPIRE, EventType.TAKEOVER_EXPIRED,
                    {"expires_at": req.expires_at.isoformat(), "reason": why},
                    outcome=f"expired: {why}; nothing was written")

    async def close(self) -> None:
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        for task in (self._sweeper, self._guard):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._beat is not None:
            with contextlib.suppress(Exception):
                await self._beat
        for task in self.core.running():
            with contextlib.suppress(Exception):
                await task
        await self._retention.close()
        await self._intake.close()
        for inst in self.instruments.values():
            await inst.lane.close()
        self.registry.release()

    async def sweep(self) -> int:
        """Expire every pending request (and question) whose time is up."""
        count = await self._decisions.expire_due()
        await self._decisions.withdraw_revoked()
        self.questions.sweep()
        self._terms.sweep()
        return count

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            with contextlib.suppress(GatewayError):
                # The claim's durable commit (an fsync) runs off the loop: on it, every door
                # stalled for the disk once a second. close() waits for a beat in flight, so
                # a late one never claims the bench again after release().
                self._beat = asyncio.ensure_future(asyncio.to_thread(self.registry.beat))
                await asyncio.shield(self._beat)
                self._fenced()
                await self._executor.interlocks.keep_held()  # a stop the store refused
                await self._executor.interlocks.refresh()  # stops and clears from elsewhere
                await self.sweep()
                await self._executor.run_approved()
                self._executor.reconcile_orphans()  # an outcome the store failed to keep
                self._retention.tick()  # starts an archive at most hourly; never waits

    async def _guard_forever(self) -> None:
        """The safe actions' sweeps, apart from the claim's beat and the store's work: a
        slow or locked store (the beat waits, then fails) never holds up the envelope watch,
        a lost client's lease or the instrument locks."""
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            self.watch.tick()  # never waits: each check queues on its lane
            keep_locks([i.lane for i in self.instruments.values()], self.core.spawn)
            with contextlib.suppress(GatewayError):
                await self._leases.sweep()

    def _fenced(self) -> None:
        """Say once, on every console and watcher, that another gateway took the bench, and
        let go of its instruments' locks."""
        if self.registry.lost is not None and not self._told_lost:
            self._told_lost = True
            self.core.notifier.publish("alert", alert="bench_lost", reason=self.registry.lost)
            # The instrument lock goes with the connection that took it: closed, it frees
            # the instrument for the new owner, and a lane with no lock never takes it again.
            for inst in self.instruments.values():
                if inst.lane.lock is not None:
                    self.core.spawn(inst.lane.close())

    def _on_remote(self, message: dict[str, Any]) -> None:
        """A change made by another gateway (called from the store's listener thread)."""
        loop = self._loop
        if loop is None or loop.is_closed() or message.get("origin") == self.core.notifier.origin:
            return
        loop.call_soon_threadsafe(self._remote_change, message)

    def _remote_change(self, message: dict[str, Any]) -> None:
        request_id = str(message.get("id", ""))
        notifier = self.core.notifier
        notifier.wake(request_id)
        notifier.publish(str(message.get("type", "request")), **{
            k: v for k, v in message.items() if k not in ("type", "origin")})
        if message.get("status") == Status.APPROVED.value and \
                message.get("bench") == self.config.bench and \
                self.registry.lost is None and not self._executor.in_flight(request_id):
            self.core.spawn(self._executor.execute(request_id))
