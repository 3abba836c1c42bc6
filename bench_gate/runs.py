"""Runs: one requester's session (``engineer``, ``script`` or ``agent``), with its goal,
its status (active, taken over by an operator, suspended after denials, closed) and its
journal. A run attached to a connection (socket door, MCP) lives and dies with it, across a
restart too. Who sees which run, and which of its requests (a requester its own only).
"""

from __future__ import annotations

from collections.abc import Callable

from .approvals import cover_for, person, require_operator
from .auth import ANONYMOUS_PREFIX, names_of, refuse_revoked, refuse_token
from .core import Core, Part, new_id
from .errors import InvalidInput, NotFound, PermissionDenied
from .models import (
    Event,
    EventType,
    Principal,
    Run,
    RunKind,
    RunStatus,
    Status,
    TakeoverRequest,
)
from .questions import QuestionDesk
from .states import RUNS, RunEvent
from .states import Event as Move
from .takeover import Requests

__all__ = ["ATTACHED", "TERMS", "Runs"]

#: Runs remembered with their owner; past this the memory starts over.
RUNS_REMEMBERED = 100_000
#: The store's table of runs that live and die with one connection (socket door, MCP).
ATTACHED = "attached_runs"
#: The store's table of runs with a heartbeat term, ``{bench, seconds[, beat]}`` per run
#: (bench_gate/terms.py).
TERMS = "run_terms"


class Runs(Part):
    def __init__(self, core: Core, requests: Requests, questions: QuestionDesk) -> None:
        super().__init__(core)
        self.requests = requests
        self.questions = questions
        #: Runs known to exist, and who made each, so a read need not load its run.
        self._owners: dict[str, str] = {}
        #: Runs closed through this gateway: a read of a known run checks this, not the store.
        self._closed_runs: set[str] = set()
        #: Called with a run's id when it closes.
        self.on_close: list[Callable[[str], None]] = []
        requests.listeners.append(self.on_move)

    def create(self, principal: Principal, kind: RunKind | str,
               goal: str | None = None, *, attached: str | None = None,
               heartbeat_seconds: int | None = None) -> Run:
        """A new run. ``attached`` names the door of a connection the run lives and dies
        with (``socket``, ``mcp``): after a restart that connection is gone, so is the run.
        ``heartbeat_seconds``: its client must be heard from once a term, or it closes
        (bench_gate/terms.py)."""
        from .terms import check_term
        heartbeat_seconds = check_term(heartbeat_seconds)
        from .quotas import check_runs  # per-requester quota (limits.open_runs)
        check_runs(self.core, principal)
        try:
            kind = RunKind(kind)
        except ValueError as exc:
            raise InvalidInput(f"run kind must be one of {[k.value for k in RunKind]}, "
                               f"not {kind!r}") from exc
        if kind is RunKind.ENGINEER and not principal.operates:
            raise PermissionDenied(f"{principal.name} is a {principal.role.value}; engineer "
                                   "runs are for operators at the bench (their own changes, "
                                   "confirmed by themselves): start a script or agent run")
        refuse_token(goal, "goal")
        run = Run(id=new_id("run"), kind=kind, principal=principal.name, goal=goal,
                  heartbeat_seconds=heartbeat_seconds, token=principal.token)
        if heartbeat_seconds is not None:  # first: a crash before the run leaves no run open
            self.store.kv_put(TERMS, run.id, {"bench": self.config.bench,
                                              "seconds": heartbeat_seconds,
                                              "heard_by": self.core.registry.instance})
        self.store.create_run(run, [Event(run_id=run.id, type=EventType.RUN_CREATED,
                                          data={"kind": kind.value, "principal": run.principal,
                                                "goal": goal,
                                                **({"heartbeat_seconds": heartbeat_seconds}
                                                   if heartbeat_seconds is not None else {})
                                                })])
        if attached is not None:
            self.store.kv_put(ATTACHED, run.id, {"bench": self.config.bench, "door": attached})
        self._remember(run)
        self.core.notifier.publish("run", id=run.id, status=run.status.value)
        return run

    def get(self, run_id: str) -> Run:
        run = self.store.get_run(run_id)
        if run is None:
            raise NotFound(f"no run {run_id!r}")
        self._remember(run)
        return run

    def owner(self, run_id: str) -> str:
        """Who made the run. Runs are never deleted and never change hands, so once known
        this needs no store read."""
        owner = self._owners.get(run_id)
        return owner if owner is not None else self.get(run_id).principal

    # ------------------------------------------------------------------ who sees what
    def may_see(self, who: Principal, run_id: str | None) -> bool:
        """Operators and admins see every run; a requester sees its own runs only."""
        if who.operates:
            return True
        try:
            return bool(run_id) and self.owner(str(run_id)) == who.name
        except NotFound:
            return False

    def visible(self, who: Principal, run_id: str) -> Run:
        """The run, if ``who`` may see it."""
        run = self.get(run_id)
        if run.principal != who.name and not who.operates:
            raise PermissionDenied(f"{run_id} belongs to {run.principal}; a requester sees "
                                   "only its own runs")
        return run

    def owned(self, who: Principal, run_id: str, doing: str) -> None:
        """Only the run's own requester ``doing`` (submits commands to it, asks for a plan)."""
        owner = self.owner(run_id)
        if owner != who.name:
            raise PermissionDenied(f"{run_id} belongs to {owner}; only its requester {doing}")

    def visible_request(self, who: Principal, request_id: str, run_id: str | None = None
                        ) -> TakeoverRequest:
        """The request, if ``who`` may see its run (and it is one of ``run_id``'s)."""
        req = self.requests.get(request_id)
        if run_id is not None and req.run_id != run_id:
            raise NotFound(f"{request_id} is not a request of {run_id}")
        self.visible(who, req.run_id)
        return req if who.operates else cover_for(req, lambda rid: self._may_open(who, rid))

    def find_request(self, who: Principal, text: str) -> TakeoverRequest:
        """``visible_request`` by id, or by a unique prefix of an id ``who`` may see."""
        if self.store.get_request(text) is not None:
            return self.visible_request(who, text)
        req = self.requests.by_prefix(text, lambda run_id: self.may_see(who, run_id))
        return req if who.operates else cover_for(req, lambda rid: self._may_open(who, rid))

    def _may_open(self, who: Principal, request_id: str) -> bool:
        other = self.store.get_request(request_id)
        return other is not None and self.may_see(who, other.run_id)

    def page(self, who: Principal, limit: int = 100, offset: int = 0) -> list[Run]:
        """Newest first; a requester's own runs only, chosen in the store before paging."""
        return self.store.list_runs(limit=limit, offset=offset,
                                    principal=None if who.operates else who.name)

    def _remember(self, run: Run) -> None:
        if len(self._owners) >= RUNS_REMEMBERED:
            self._owners.clear()
        self._owners[run.id] = run.principal

    def set_goal(self, run_id: str, goal: str) -> Run:
        refuse_token(goal, "goal")
        run = self.get(run_id)
        run.goal = goal
        self.store.save_run(run, [Event(run_id=run.id, type=EventType.GOAL_SET,
                                        data={"goal": goal})])
        return run

    def take_over(self, run_id: str, operator: Principal, reason: str) -> Run:
        """An operator holds every write of the run until release. Its own requester takes
        over only a run they could release themselves: taking over their suspended run (or
        one another operator holds) would turn it into a takeover of their own, theirs to
        release."""
        require_operator(operator)
        refuse_revoked(self.store, operator)  # a takeover holds the run's writes: a decision
        refuse_token(reason, "reason")
        run = self.get(run_id)
        why = own_release(run, operator, "take it over")
        if why is not None:
            raise PermissionDenied(why)
        run.status = RUNS.move(run_id, run.status, RunEvent.TAKE_OVER, "the run is closed")
        run.takeover_reason = reason
        run.takeover_by = operator.name
        self.store.save_run(run, [Event(run_id=run_id, type=EventType.RUN_TAKEN_OVER,
                                        data={"by": operator.name, "reason": reason})])
        self.core.notifier.publish("run", id=run.id, status=run.status.value)
        return run

    def release(self, run_id: str, operator: Principal) -> Run:
        """End an operator's takeover or a suspension; the run's writes go on. A suspension
        is lifted by another person than the run's requester (:func:`own_release`)."""
        require_operator(operator)
        refuse_revoked(self.store, operator)
        run = self.get(run_id)
        why = own_release(run, operator, "release it")
        if why is not None:
            raise PermissionDenied(why)
        run.status = RUNS.move(run_id, run.status, RunEvent.RELEASE,
                               "only a taken-over or suspended run can be released")
        run.takeover_reason = run.takeover_by = None
        self.store.save_run(run, [Event(run_id=run_id, type=EventType.TAKEOVER_RELEASED,
                                        data={"by": operator.name})])
        self.core.notifier.publish("run", id=run.id, status=run.status.value)
        return run

    def close_revoked(self, tokens: frozenset[str]) -> int:
        """Close every open run made with one of ``tokens`` (revoked), as a socket-door
        connection or an MCP session on a revoked token closes: its undecided requests
        are cancelled and nothing more runs in it (a leaked token's requests are never
        approved into the instrument). Returns how many closed."""
        closed = 0
        for name in sorted(names_of(self.store, tokens)):
            for run in self.store.list_runs(limit=10_000, principal=name):
                if run.token in tokens and run.status is not RunStatus.CLOSED:
                    self.close(run.id, "its token was revoked")
                    closed += 1
        return closed

    def close(self, run_id: str, reason: str = "the requester disconnected") -> None:
        """The requester is gone: cancel its undecided and approved-but-unstarted requests,
        never run them for nobody."""
        run = self.get(run_id)
        for status in (Status.PENDING, Status.APPROVED):
            for req in self.store.list_requests(status=status, run_id=run_id, limit=10_000):
                self.requests.move(req, Move.CANCEL, EventType.TAKEOVER_CANCELLED,
                                   {"reason": reason},
                                   outcome=f"cancelled: {reason}; nothing was written")
        self.questions.cancel_run(run_id)
        events: list[Event] = []
        if run.status is not RunStatus.CLOSED:  # closing twice is closing once
            run.status = RUNS.move(run_id, run.status, RunEvent.CLOSE)
            run.closed_reason = reason
            events.append(Event(run_id=run_id, type=EventType.RUN_CLOSED,
                                data={"reason": reason}))
        self._closed_runs.add(run_id)
        self.store.save_run(run, events)
        self.store.kv_delete(ATTACHED, run_id)
        self.store.kv_delete(TERMS, run_id)
        if events:  # told live (another gateway's lane turn reads the run: last_moment)
            self.core.notifier.publish("run", id=run_id, status=run.status.value,
                                       reason=reason)
        for hook in self.on_close:  # e.g. its standing plans end with it
            hook(run_id)

    def close_gone_clients(self) -> None:
        """At start: every run attached to a connection of this bench's previous process
        lost its client with that process. Its requests must never run."""
        for run_id, data in self.store.kv_items(ATTACHED):
            if data.get("bench") != self.config.bench:
                continue
            try:
                self.close(run_id, "client gone: its connection ended with a restart")
            except NotFound:
                self.store.kv_delete(ATTACHED, run_id)

    def after_denial(self, req: TakeoverRequest, why: str) -> str | None:
        """Count denials (an expiry is one); suspend a run that keeps being told no. Returns
        why, when this one suspended it ("suspended after 3 denials in a row")."""
        events: list[Event] = []
        if req.handoff.get("confidence_gate"):
            events.append(Event(run_id=req.run_id, request_id=req.id,
                                type=EventType.STEP_FAILED,
                                data={"reason": f"diverted step {why}", "step_id": req.step_id}))
        run = self.store.get_run(req.run_id)
        if run is None:
            return None
        run.denials_in_a_row += 1
        run.denials_total += 1
        policy = self.config.policy
        suspended = RUNS.target(run.status, RunEvent.SUSPEND)  # not twice, never when closed
        if suspended is not None and (
                run.denials_in_a_row >= policy.denials_in_a_row
                or run.denials_total >= policy.denials_total):
            run.status = suspended
            reason = (f"{run.denials_in_a_row} denials in a row"
                      if run.denials_in_a_row >= policy.denials_in_a_row
                      else f"{run.denials_total} denials in all")
            run.takeover_reason = f"suspended after {reason}"
            events.append(Event(run_id=run.id, type=EventType.RUN_SUSPENDED,
                                data={"reason": run.takeover_reason,
                                      "in_a_row": run.denials_in_a_row,
                                      "total": run.denials_total}))
            self.core.notifier.publish("run", id=run.id, status=run.status.value)
        self.store.save_run(run, events)
        return run.takeover_reason if events and events[-1].type is EventType.RUN_SUSPENDED \
            else None


    def on_move(self, req: TakeoverRequest, dst: Status) -> None:
        """A write that executed ends the run's streak of denials."""
        if dst is Status.EXECUTED:
            run = self.store.get_run(req.run_id)
            if run is not None and run.denials_in_a_row:
                run.denials_in_a_row = 0
                self.store.save_run(run, [])

    def may_write(self, run: Run) -> str | None:
        """Why ``run`` may not write, or None: a socket-door connection without a token,
        on a bench whose ``socket_door.anonymous`` is ``read``."""
        if self.config.socket_door.anonymous == "read" \
                and run.principal.startswith(ANONYMOUS_PREFIX):
            return ("this bench takes writes only from a connection that presented its token "
                    "first (GATE:TOK \"bg_...\"; socket_door.anonymous = \"read\"): without "
                    "one, a connection may only read")
        return None

    def known(self, run_id: str) -> bool:
        """The run exists (runs are never deleted): a read need not load it."""
        return run_id in self._owners

    def is_closed(self, run_id: str) -> bool:
        """Closed through this gateway (a read of a known run asks this, not the store)."""
        return run_id in self._closed_runs


def own_release(run: Run, who: Principal, doing: str) -> str | None:
    """Why ``who``, the run's own requester, may not release it (or take it over), or None.

    A suspension (denials, an emergency stop) asks another person to look at the run: an
    operator who is also its requester (an engineer running their own script) lifting it
    would defeat that. A takeover by another operator is that operator's hold on the run.
    The requester's own takeover of a run that was not suspended is theirs to end. People
    are compared as identities are (:func:`bench_gate.approvals.person`)."""
    me = person(who.name)
    if me != person(run.principal):
        return None
    if run.status is RunStatus.SUSPENDED:
        return (f"{run.id} is {run.takeover_reason or 'suspended'}; {who.name} made it and "
                f"cannot {doing}: an operator other than its requester must look at it")
    if run.status is RunStatus.TAKEN_OVER and person(run.takeover_by or "") != me:
        return (f"{run.id} is taken over by {run.takeover_by or 'another operator'}; "
                f"{who.name} made it and cannot {doing}: that takeover is for another "
                "person to end")
    return None
