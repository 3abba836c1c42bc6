"""The gateway core's one façade: every door (socket, HTTP, MCP, console, CLI) calls this,
and only this. It wires the parts of the corridor together and delegates to them:

    door → intake (screen, classify, decide) → pass: lane read │ refuse │ hold:
    takeover (the request, as shown) → decisions (approvals) → executor (live recheck,
    canonical write, read-back, safe action) → receipt

docs/architecture.md draws it with the module that owns each step.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from .calibration import Calibration
from .config import BenchConfig
from .core import Core, Instrument
from .decisions import Decisions, GrantResult
from .errors import GatewayError
from .executor import Executor
from .instruments import AsyncLink, Link
from .intake import Intake, Outcome, SubmitResult
from .models import (
    ApprovalKind,
    Principal,
    Run,
    RunKind,
    Status,
    TakeoverRequest,
    now,
)
from .planning import PlanDesk
from .plans import Plan, PlanScope
from .questions import QuestionDesk
from .runs import Runs
from .safety import Safety
from .scpi import Profile
from .setpoints import Setpoints
from .snapshots import Snapshots
from .store import Store
from .takeover import Requests

__all__ = ["Gateway", "GrantResult", "Outcome", "SubmitResult"]

#: How often the sweeper expires requests, renews the bench claim and picks up approvals.
SWEEP_SECONDS = 0.5


class Gateway:
    """The gateway core. Create it, ``await start()``, use it, ``await close()``."""

    def __init__(self, config: BenchConfig, store: Store,
                 links: dict[str, Link | AsyncLink] | None = None,
                 clock: Callable[[], Any] = now) -> None:
        self.core = core = Core(config, store, links, clock)
        self.instruments: dict[str, Instrument] = core.instruments
        self.registry = core.registry
        #: Questions agents ask the operator (same queue, same expiry, same journal).
        self.questions = QuestionDesk(store, clock=lambda: self.clock(),
                                      publish=core.notifier.publish, policy=config.policy)
        snaps = Snapshots(core)
        setpoints = Setpoints(core)
        self._requests = requests = Requests(core, snaps, setpoints)
        self._runs = runs = Runs(core, requests, self.questions)
        self._executor = executor = Executor(core, snaps, setpoints, requests, runs,
                                             Safety(core, snaps))
        self._calibration = calibration = Calibration(core, requests, runs)
        self._plans = plans = PlanDesk(core, snaps, requests, runs, executor, calibration)
        self._decisions = Decisions(core, snaps, setpoints, requests, runs, executor)
        self._intake = Intake(core, requests, runs, plans)
        self._snaps = snaps
        self._sweeper: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unlisten: Callable[[], None] | None = None

    # ------------------------------------------------------------------ the bench
    @property
    def config(self) -> BenchConfig:
        return self.core.config

    @property
    def store(self) -> Store:
        return self.core.store

    @store.setter
    def store(self, store: Store) -> None:
        self.core.store = store

    @property
    def clock(self) -> Callable[[], Any]:
        return self.core.clock

    @property
    def bench(self) -> str:
        return self.config.bench

    @property
    def metrics(self) -> dict[str, float]:
        return self._decisions.metrics

    def instrument(self, name: str) -> Instrument:
        return self.core.instrument(name)

    def owns(self, req: TakeoverRequest) -> bool:
        return self.core.owns(req)

    def profile_for(self, req: TakeoverRequest) -> Profile:
        return self.core.profile_for(req)

    async def live_state(self, instrument: str) -> dict[str, Any]:
        """Every field of every channel, measured values included, read live."""
        return await self._snaps.live_state(instrument)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Claim the bench name, recover from the store, then run the one sweeper."""
        self._loop = asyncio.get_running_loop()
        self.registry.claim()
        self._runs.close_gone_clients()
        await self.sweep()
        for req in self.store.list_requests(status=Status.EXECUTING, limit=10_000):
            if self.owns(req):
                await self._executor.reconcile_interrupted(req)
        await self._executor.run_approved()
        # Other gateways on a shared store tell us of changes (PostgreSQL LISTEN/NOTIFY).
        self._unlisten = self.store.listen(self._on_remote)
        self._sweeper = asyncio.create_task(self._sweep_forever())

    async def close(self) -> None:
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for task in self.core.running():
            with contextlib.suppress(Exception):
                await task
        await self._intake.close()
        for inst in self.instruments.values():
            await inst.lane.close()
        self.registry.release()

    async def sweep(self) -> int:
        """Expire every pending request (and question) whose time is up."""
        count = await self._decisions.expire_due()
        self.questions.sweep()
        return count

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            with contextlib.suppress(GatewayError):
                self.registry.beat()
                await self.sweep()
                await self._executor.run_approved()

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
                message.get("bench") == self.bench and not self._executor.in_flight(request_id):
            self.core.spawn(self._executor.execute(request_id))

    # ------------------------------------------------------------------ events
    def subscribe(self) -> contextlib.AbstractAsyncContextManager[asyncio.Queue[dict[str, Any]]]:
        """Changes to requests and runs, for the console, the CLI and SSE."""
        return self.core.notifier.subscribe()

    def waiting_on(self, request_id: str) -> int:
        """How many waiters wait on a request now."""
        return self.core.notifier.waiters(request_id)

    # ------------------------------------------------------------------ runs
    def create_run(self, principal: Principal, kind: RunKind | str,
                   goal: str | None = None, *, attached: str | None = None) -> Run:
        return self._runs.create(principal, kind, goal, attached=attached)

    def get_run(self, run_id: str) -> Run:
        return self._runs.get(run_id)

    def run_owner(self, run_id: str) -> str:
        return self._runs.owner(run_id)

    def set_goal(self, run_id: str, goal: str) -> Run:
        return self._runs.set_goal(run_id, goal)

    def take_over(self, run_id: str, operator: Principal, reason: str) -> Run:
        return self._runs.take_over(run_id, operator, reason)

    def release(self, run_id: str, operator: Principal) -> Run:
        return self._runs.release(run_id, operator)

    def close_run(self, run_id: str, reason: str = "the requester disconnected") -> None:
        self._runs.close(run_id, reason)

    # ------------------------------------------------------------------ requests
    async def submit(self, run_id: str, instrument: str, message: str, *,
                     rationale: str | None = None, confidence: float | None = None,
                     step_id: str | None = None, idempotency_key: str | None = None,
                     timeout_minutes: int | None = None) -> SubmitResult:
        return await self._intake.submit(
            run_id, instrument, message, rationale=rationale, confidence=confidence,
            step_id=step_id, idempotency_key=idempotency_key, timeout_minutes=timeout_minutes)

    def get_request(self, request_id: str) -> TakeoverRequest:
        return self._requests.get(request_id)

    def list_requests(self, status: Status | None = None, run_id: str | None = None,
                      instrument: str | None = None, limit: int = 100, offset: int = 0,
                      sort: str = "newest", requester: str | None = None
                      ) -> list[TakeoverRequest]:
        """One page, sorted in the store (``newest``, or ``expiry``: soonest first). It is
        a ``store.RequestPage``: a list that also carries ``total``, how many match."""
        return self._requests.page(status, run_id, instrument, limit, offset, sort, requester)

    async def wait(self, request_id: str, timeout: float, *, follow: bool = True
                   ) -> TakeoverRequest:
        """Wait for a decision, holding no thread (a requester's view follows a stale
        request to its fresh one)."""
        return await self._requests.wait(request_id, timeout, follow=follow)

    async def grant(self, request_id: str, approver: Principal,
                    kinds: list[ApprovalKind | str], notes: str = "",
                    edits: dict[str, str] | None = None, *, proposal_hash: str
                    ) -> GrantResult:
        return await self._decisions.grant(request_id, approver, kinds, notes, edits,
                                           proposal_hash=proposal_hash)

    async def deny(self, request_id: str, approver: Principal, notes: str, *,
                   proposal_hash: str) -> TakeoverRequest:
        return await self._decisions.deny(request_id, approver, notes,
                                          proposal_hash=proposal_hash)

    async def cancel(self, request_id: str, who: Principal, reason: str = "withdrawn"
                     ) -> TakeoverRequest:
        return await self._decisions.cancel(request_id, who, reason)

    # ------------------------------------------------------------------ plans
    async def request_plan(self, run_id: str, scope: PlanScope | dict[str, Any],
                           rationale: str | None = None) -> TakeoverRequest:
        return await self._plans.request(run_id, scope, rationale)

    def list_plans(self, run_id: str) -> list[Plan]:
        return self._plans.of_run(run_id)

    def get_plan(self, plan_id: str) -> Plan:
        return self._plans.get(plan_id)

    def revoke_plan(self, plan_id: str, operator: Principal) -> Plan:
        return self._plans.revoke(plan_id, operator)

    def feedback(self, run_id: str, step_id: str, score_value: int, notes: str = "",
                 who: Principal | None = None) -> dict[str, Any]:
        return self._calibration.feedback(run_id, step_id, score_value, notes, who)
