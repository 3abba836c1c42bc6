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
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from . import doorway
from .calibration import Calibration
from .config import BenchConfig, ChannelLimits
from .core import Core, Instrument
from .decisions import Decisions, GrantResult
from .engineers import Engineers, panel_message
from .errors import PermissionDenied, TransitionError
from .executor import Executor
from .holding import StopHold
from .instruments import AsyncLink, Link
from .intake import Intake, Outcome, SubmitResult
from .interlocks import Interlocks
from .journal import verify_chain
from .leases import Leases
from .lifecycle import SWEEP_SECONDS as SWEEP_SECONDS  # its old home
from .lifecycle import Lifecycle
from .listing import RequestSummary
from .locking import LockState, LockStatus
from .models import (
    ApprovalKind,
    Event,
    Principal,
    Run,
    RunKind,
    RunStatus,
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
from .store import ChainReport, RequestPage, RequestSort, Store
from .takeover import Requests
from .terms import Terms
from .watch import Watch

__all__ = ["Figures", "Gateway", "GrantResult", "Outcome", "RequestPage", "RequestSort",
           "RequestSummary", "SubmitResult"]

@dataclass(frozen=True, slots=True)
class Figures:
    """What ``/metrics`` shows: the queue, the decisions and their time, I/O errors."""

    pending: int
    decisions: float
    decision_seconds: float
    io_errors: dict[str, int]


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
        self._engineers = Engineers(core, runs)
        self._interlocks = interlocks = Interlocks(core, requests, runs)
        requests.stopped = interlocks.check_write  # once the snapshot read who answers
        self._leases = leases = Leases(core)
        #: Heartbeat terms: a run whose client went silent closes (terms.py).
        self._terms = terms = Terms(core, runs)
        leases.heard = terms.heard
        safety = Safety(core, snaps)
        self._executor = executor = Executor(core, snaps, setpoints, requests, runs,
                                             safety, interlocks, leases)
        #: The envelope watch: a breach nobody wrote is made safe within watch_seconds.
        self.watch = Watch(core, safety, StopHold(core, interlocks))
        self._calibration = calibration = Calibration(core, requests, runs)
        self._plans = plans = PlanDesk(core, snaps, requests, runs, executor, calibration)
        # A stop ends the plans and setpoints in force on what it stops; so does a breach.
        interlocks.on_stop += [plans.stand_down, setpoints.stand_down]
        for safed in (plans.made_safe, setpoints.made_safe):
            safety.on_safed.append(interlocks.or_held(safed))
            leases.on_safed.append(interlocks.or_held(  # someone may be at the DUT now
                functools.partial(safed, why="its client's lease ran out")))
        self._decisions = Decisions(core, snaps, setpoints, requests, runs, executor)
        self._intake = Intake(core, requests, runs, plans, interlocks, leases)
        executor.reselect = self._intake.reselected
        executor.confirmed = terms.confirmed
        #: A kept read in one step, or None: :meth:`submit` it (``Intake.read``). Bound
        #: here, not wrapped: a read is what a bench does most, and every frame is on it.
        self.read: Callable[[str, str, str], Awaitable[SubmitResult | None]] = \
            self._intake.read
        self._snaps = snaps
        #: Start, the sweeper, other gateways' changes, close (lifecycle.py).
        self._lifecycle = Lifecycle(core, self.questions, runs, terms, leases, self.watch,
                                    executor, self._decisions, self._intake)

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

    def profile(self, instrument: str) -> Profile:
        """The profile of one of this bench's instruments."""
        return self.core.instrument(instrument).profile

    def instrument_lock(self, instrument: str) -> LockState:
        """Whether the gateway holds the instrument's lock (bench_gate/locking.py)."""
        lock = self.core.instrument(instrument).lane.lock
        return lock.state if lock is not None else LockState(LockStatus.NOT_LOCKABLE)

    def instrument_identity(self, instrument: str) -> dict[str, Any]:
        """Who answers ``*IDN?`` and whether its profile describes it (identity.py), its
        profile's name, and why its last job did not reach it (None once one did)."""
        inst = self.core.instrument(instrument)
        return {**inst.identity.as_dict(), "profile": inst.profile.name,
                "failing": inst.lane.failing}

    def envelope(self, instrument: str) -> dict[int, ChannelLimits]:
        """The bench's hard limits for one instrument, per channel, as configured now."""
        return self.core.limits(instrument)

    def figures(self) -> Figures:
        metrics = self._decisions.metrics
        return Figures(pending=self.store.page_requests(Status.PENDING, limit=1).total,
                       decisions=metrics["decisions"],
                       decision_seconds=metrics["decision_seconds"],
                       io_errors={name: inst.lane.io_errors
                                  for name, inst in self.instruments.items()})

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Claim the bench name, recover from the store, then run the one sweeper."""
        await self._lifecycle.start()

    async def close(self) -> None:
        await self._lifecycle.close()

    async def sweep(self) -> int:
        """Expire every pending request (and question) whose time is up."""
        return await self._lifecycle.sweep()

    # ------------------------------------------------------------------ events
    def subscribe(self) -> contextlib.AbstractAsyncContextManager[asyncio.Queue[dict[str, Any]]]:
        """Changes to requests and runs, for the console, the CLI and SSE."""
        return self.core.notifier.subscribe()

    def waiting_on(self, request_id: str) -> int:
        """How many waiters wait on a request now."""
        return self.core.notifier.waiters(request_id)

    # ------------------------------------------------------------------ runs
    def create_run(self, principal: Principal, kind: RunKind | str,
                   goal: str | None = None, *, attached: str | None = None,
                   heartbeat_seconds: int | None = None) -> Run:
        """``heartbeat_seconds``: the run closes if its client is silent that long."""
        run = self._runs.create(principal, kind, goal, attached=attached,
                                heartbeat_seconds=heartbeat_seconds)
        self._terms.created(run.id, run.heartbeat_seconds)  # its term starts now
        return run

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

    def list_runs(self, who: Principal, limit: int = 100, offset: int = 0) -> list[Run]:
        """Newest first; a requester sees its own runs only, filtered before paging."""
        return self._runs.page(who, limit, offset)

    def journal(self, run_id: str, after: int = 0, limit: int = 100) -> list[Event]:
        """One page of a run's journal, oldest first, after the event numbered ``after``."""
        return self.store.journal(run_id, after=after, limit=limit)

    # ------------------------------------------------------------------ who sees what
    def may_see(self, who: Principal, run_id: str | None) -> bool:
        """Operators and admins see every run; a requester sees its own runs only."""
        return self._runs.may_see(who, run_id)

    def visible_run(self, who: Principal, run_id: str) -> Run:
        """The run, if ``who`` may see it (PermissionDenied if not)."""
        return self._runs.visible(who, run_id)

    def owned_run(self, who: Principal, run_id: str, doing: str) -> None:
        """PermissionDenied unless ``who`` made the run (only its requester ``doing``)."""
        self._runs.owned(who, run_id, doing)

    def visible_request(self, who: Principal, request_id: str, run_id: str | None = None
                        ) -> TakeoverRequest:
        """The request, if ``who`` may see its run (and it is one of ``run_id``'s)."""
        return self._runs.visible_request(who, request_id, run_id)

    def find_request(self, who: Principal, text: str) -> TakeoverRequest:
        """``visible_request`` by id, or by a unique prefix of an id ``who`` may see."""
        return self._runs.find_request(who, text)

    # ------------------------------------------------------------------ requests
    async def submit(self, run_id: str, instrument: str, message: str, *,
                     rationale: str | None = None, confidence: float | None = None,
                     step_id: str | None = None, idempotency_key: str | None = None,
                     timeout_minutes: int | None = None, origin: str = "client",
                     on_resend: bool = False) -> SubmitResult:
        """``origin`` is "gateway" for a door's own housekeeping (the socket door draining
        the instrument's error queue): the journal tells it from what the client sent."""
        return await self._intake.submit(
            run_id, instrument, message, rationale=rationale, confidence=confidence,
            step_id=step_id, idempotency_key=idempotency_key, timeout_minutes=timeout_minutes,
            origin=origin, on_resend=on_resend)

    async def resend(self, run_id: str, request_id: str, message: str
                     ) -> TakeoverRequest | None:
        """``message`` resent in run ``run_id`` for a request held with ``on_resend``: if it
        is the identical command and the request is approved and unexpired, run it now,
        once (live recheck, write, read-back) and return how it ended. The request as it
        stands if it is not approved (or just expired); None if the resend is not its."""
        req = await self._intake.resent(run_id, request_id, message)
        if req is None or req.status is not Status.APPROVED:
            return req
        return await self._executor.execute(req.id, resent=True)

    def get_request(self, request_id: str) -> TakeoverRequest:
        return self._requests.get(request_id)

    def list_requests(self, status: Status | None = None, run_id: str | None = None,
                      instrument: str | None = None, limit: int = 100, offset: int = 0,
                      sort: str = "newest", requester: str | None = None
                      ) -> RequestPage:
        """One page, sorted in the store (``newest``, or ``expiry``: soonest first): a list
        that also carries ``total``, how many match. Its items are what a list shows
        (``RequestSummary``); ``get_request`` gives one whole."""
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

    # ------------------------------------------------------------------ interlocks
    async def emergency_stop(self, who: Principal, door: str,
                             instrument: str | None = None) -> dict[str, Any]:
        """Make every channel safe at once (no approval: safe actions never wait); cancel
        what waits; refuse every write until an operator clears the stop."""
        return await self._interlocks.stop(who, door, instrument)

    def clear_stop(self, who: Principal, instrument: str | None = None) -> list[str]:
        return self._interlocks.clear(who, instrument)

    def verify_journal(self) -> ChainReport:
        """Walk the journal's hash chain (archived segments, then the store, to its head)."""
        return verify_chain(self)

    def heartbeat(self, run_id: str, who: Principal) -> dict[str, Any]:
        """The run's client is still there: its leases and its term go on. An operator's
        heartbeat keeps the leases only: a run's term is its own client's to renew."""
        owner = self._runs.owner(run_id)
        if owner != who.name and not who.operates:
            raise PermissionDenied(f"{run_id} belongs to {owner}")
        run = self._runs.get(run_id)
        if run.status is RunStatus.CLOSED:  # nothing to keep: it reopens nothing
            raise TransitionError(run_id, "closed", "heartbeat",
                                  run.closed_reason or "start a new run")
        self._leases.renew(run_id, client=owner == who.name)
        return {"run_id": run_id, "lease_seconds": self.config.policy.lease_seconds,
                "heartbeat_seconds": run.heartbeat_seconds,
                "seconds_left": self._terms.left(run_id),
                "leases": [lease for lease in self._leases.held()
                           if lease["run_id"] == run_id]}

    def client_connected(self, run_id: str, live: bool) -> None:
        """A door's client connected to (True) or left (False) a run: while connected, the
        run's leases renew themselves."""
        self._leases.connected(run_id, live)

    def leases(self) -> list[dict[str, Any]]:
        """This bench's leases on energized channels, with the seconds left on each."""
        return self._leases.held()

    def stopped(self) -> dict[str, dict[str, Any]]:
        """The instruments stopped now, with who stopped them, when and through what."""
        return self._interlocks.stopped()

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

    # ------------------------------------------------------------------ the console
    def engineer_run(self, who: Principal) -> str:
        """This engineer's console run: reused while active, else a new one."""
        return self._engineers.run_of(who)

    async def panel_change(self, who: Principal, instrument: str, channel: int,
                           setpoints: dict[str, str], output: bool | None,
                           rationale: str | None = None) -> SubmitResult:
        """An engineer's change from the console panel, rendered through the profile and
        submitted on their engineer run: held like any other write, never sent as it is
        (Refused if refused)."""
        message = panel_message(self.profile(instrument), channel, setpoints, output)
        return await doorway.submit(self, self.engineer_run(who), instrument, message,
                                    rationale=rationale)

    def note_shown(self, req: TakeoverRequest, who: Principal, action: str,
                   live: dict[str, str] | None, summary: str, key: str | None = None) -> None:
        """What a reviewer was shown, and did, beside the journal."""
        self._engineers.note_shown(req, who, action, live, summary, key)

    def shown(self, run_id: str) -> list[dict[str, Any]]:
        """What reviewers were shown of a run's requests, for its timeline."""
        return self._engineers.shown(run_id)
