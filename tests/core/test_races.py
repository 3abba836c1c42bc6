"""Races: many concurrent decisions on the same requests, two operators approving the two
halves of an output enable at once, a change committed between a decision's read and its
compare-and-swap, and a hypothesis state machine of the takeover core against the real
Gateway on an in-memory simulated bench.

After every step: exactly one outcome per request, consistent with the journal (a terminal
status has exactly one terminal event, a live one has none), and nothing written to the
instrument without a matching approval set on the final proposal hash, by someone other
than the requester, executed at most once.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    rule,
)

from bench_gate.config import BenchConfig, default_config
from bench_gate.errors import GatewayError, ProposalChanged, TransitionError
from bench_gate.gateway import Gateway
from bench_gate.models import EventType, Principal, Role, RunKind, Status, TakeoverRequest
from bench_gate.states import TERMINAL
from bench_gate.store import SqliteStore
from sim_instruments import SimBench
from tests.conftest import Clock
from tests.faults import FaultLink, SimLink

OLGA = Principal(name="olga", role=Role.OPERATOR)
PETE = Principal(name="pete", role=Role.OPERATOR)
SCRIPT = Principal(name="script-7", role=Role.REQUESTER)

#: The one journal event each terminal status is reached by.
TERMINAL_EVENT = {
    Status.EXECUTED: EventType.STEP_COMPLETED,
    Status.FAILED: EventType.STEP_FAILED,
    Status.AMBIGUOUS: EventType.STEP_FAILED,
    Status.DENIED: EventType.TAKEOVER_DENIED,
    Status.EXPIRED: EventType.TAKEOVER_EXPIRED,
    Status.CANCELLED: EventType.TAKEOVER_CANCELLED,
    Status.STALE: EventType.TAKEOVER_STALE,
}


def memory_gateway(clock: Clock, config: BenchConfig | None = None
                   ) -> tuple[Gateway, SimBench, FaultLink]:
    """The real Gateway on the simulated bench, in memory: no sockets, no files."""
    bench = SimBench()
    psu = FaultLink(SimLink(bench.psu, "psu"), "psu")  # records every call
    gw = Gateway(config or default_config(), SqliteStore(":memory:"),
                 links={"psu": psu, "dmm": SimLink(bench.dmm, "dmm")}, clock=clock)
    return gw, bench, psu


def check_consistent(gw: Gateway, link: FaultLink) -> Counter[str]:
    """Every invariant of the issue over the whole store; returns the count per status."""
    statuses: Counter[str] = Counter()
    writes = Counter(c for c in link.calls if not c.rstrip().endswith("?")
                     and not c.split(" ")[0].endswith("?"))
    requests = gw.store.list_requests(limit=100_000)
    by_request: dict[tuple[str, str | None], list[Any]] = {}
    for run_id in {req.run_id for req in requests}:  # each run's journal read once
        for event in gw.store.journal(run_id, limit=100_000):
            by_request.setdefault((run_id, event.request_id), []).append(event)
    for req in requests:
        statuses[req.status.value] += 1
        journal = by_request.get((req.run_id, req.id), [])
        moved_to = [e for e in journal if e.data.get("status") in {s.value for s in TERMINAL}]
        if req.status in TERMINAL:
            assert len(moved_to) == 1, (req.id, req.status, [e.type for e in moved_to])
            assert moved_to[0].type is TERMINAL_EVENT[req.status], (req.status, moved_to[0])
            assert moved_to[0].data["status"] == req.status.value
        else:
            assert moved_to == [], (req.id, req.status, moved_to)
        started = [e for e in journal if e.type is EventType.STEP_STARTED]
        assert len(started) <= 1, f"{req.id} started {len(started)} times"
        if started or req.status in (Status.EXECUTED, Status.EXECUTING, Status.AMBIGUOUS):
            _check_approved(gw, req, journal)
        if req.status is Status.EXECUTED:
            for command in {a.canonical for a in req.actions if a.effect != "select"}:
                if not command.split(" ")[0].endswith("?"):
                    assert writes[command] >= 1, f"{req.id} executed but {command} never sent"
    return statuses


def _check_approved(gw: Gateway, req: TakeoverRequest, journal: list[Any]) -> None:
    run = gw.get_run(req.run_id)
    valid = req.valid_approvals()
    assert {a.kind for a in valid} >= set(req.required), f"{req.id} ran without approvals"
    for a in valid:
        assert a.proposal_hash == req.proposal_hash
        if run.kind is not RunKind.ENGINEER or gw.config.policy.independent_approver:
            assert a.by != run.principal, f"{req.id} approved by its own requester"
        granted = [e for e in journal if e.type is EventType.APPROVAL_GRANTED
                   and e.data.get("kind") == a.kind.value and e.data.get("by") == a.by
                   and e.data.get("proposal_hash") == req.proposal_hash]
        assert granted, f"{req.id}: approval {a.kind.value} by {a.by} not journaled"


# ------------------------------------------------------------------ concurrent decisions
@pytest.fixture
async def memgw(clock: Clock) -> AsyncIterator[tuple[Gateway, SimBench, FaultLink]]:
    gw, bench, link = memory_gateway(clock)
    await gw.start()
    yield gw, bench, link
    await gw.close()
    gw.store.close()


async def _attempt(coro: Coroutine[Any, Any, Any]) -> str:
    try:
        await coro
    except TransitionError:
        return "lost"
    except GatewayError as exc:
        return type(exc).__name__
    return "won"


async def test_many_concurrent_decisions_give_one_outcome_each(
        memgw: tuple[Gateway, SimBench, FaultLink], clock: Clock) -> None:
    gw, _, link = memgw
    rng = random.Random(7)
    run = gw.create_run(SCRIPT, "script")
    requests = []
    for i in range(40):
        message = rng.choice([f"VOLT {1 + i / 100:.2f},(@1)", f"CURR 0.{i % 4 + 1},(@2)",
                              f"VOLT {2 + i / 100:.2f},(@3);:CURR 0.4,(@3);:OUTP ON,(@3)"])
        req = (await gw.submit(run.id, "psu", message, timeout_minutes=1)).request
        assert req is not None
        requests.append(req)
    clock.advance(seconds=59)

    def contenders(req: TakeoverRequest) -> list[Coroutine[Any, Any, Any]]:
        calls: list[Callable[[], Coroutine[Any, Any, Any]]] = [
            lambda: gw.grant(req.id, OLGA, [k.value for k in req.required],
                             proposal_hash=req.proposal_hash),
            lambda: gw.grant(req.id, PETE, [req.required[-1].value],
                             proposal_hash=req.proposal_hash),
            lambda: gw.grant(req.id, PETE, [req.required[0].value],
                             proposal_hash=req.proposal_hash),
            lambda: gw.deny(req.id, PETE, "no", proposal_hash=req.proposal_hash),
            lambda: gw.cancel(req.id, SCRIPT, "changed my mind"),
            gw.sweep,
        ]
        rng.shuffle(calls)
        return [c() for c in calls]

    async def release_and_take_over() -> None:
        gw.take_over(run.id, OLGA, "looking")
        await asyncio.sleep(0)
        gw.release(run.id, OLGA)

    clock.advance(seconds=rng.choice([0, 2]))  # some expire under the contenders
    results = await asyncio.gather(*[_attempt(c) for req in requests for c in contenders(req)],
                                   release_and_take_over())
    assert "PermissionDenied" not in results and "InvalidInput" not in results
    statuses = check_consistent(gw, link)
    assert sum(statuses.values()) == len(requests)
    assert all(Status(s) in TERMINAL for s in statuses), statuses


async def test_two_operators_approve_the_two_halves_at_once(
        memgw: tuple[Gateway, SimBench, FaultLink]) -> None:
    gw, bench, link = memgw
    run = gw.create_run(SCRIPT, "script")
    for attempt in range(20):
        ch = 1 + attempt % 3
        volts = f"{1 + attempt / 10:.1f}"
        bench.psu.handle_message(f"OUTP OFF,(@{ch})")
        message = f"VOLT {volts},(@{ch});:CURR 0.4,(@{ch});:OUTP ON,(@{ch})"
        req = (await gw.submit(run.id, "psu", message)).request
        assert req is not None
        first, second = (OLGA, PETE) if attempt % 2 else (PETE, OLGA)
        outcomes = await asyncio.gather(
            gw.grant(req.id, first, ["setpoint"], proposal_hash=req.proposal_hash),
            gw.grant(req.id, second, ["output_enable"], proposal_hash=req.proposal_hash))
        final = gw.get_request(req.id)
        assert final.status is Status.EXECUTED, final.outcome
        assert sum(o.request.status is Status.EXECUTED for o in outcomes) >= 1
        enables = [c for c in link.calls if c == f"OUTP 1,(@{ch})"]
        assert len(enables) == attempt // 3 + 1, "the output enable was sent exactly once"
    check_consistent(gw, link)


class _CasRace:
    """A store wrapper that lets another decision commit between a caller's read of a
    request and its compare-and-swap: what two gateways, or two worker threads, do."""

    def __init__(self, store: Any, request_id: str, other: Callable[[], None]) -> None:
        self._store = store
        self._request_id = request_id
        self._other: Callable[[], None] | None = other

    def save_request(self, req: TakeoverRequest, expected_version: int, events: Any) -> bool:
        if req.id == self._request_id and self._other is not None:
            other, self._other = self._other, None
            other()
        result: bool = self._store.save_request(req, expected_version, events)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def test_an_edit_between_read_and_swap_voids_the_other_approval(
        memgw: tuple[Gateway, SimBench, FaultLink]) -> None:
    """Pete approves the output enable of what he saw (CH2 at 2 V). Before his approval is
    stored, Olga approves the setpoint with an edit to 9 V. Pete's retry must not bind his
    approval to the 9 V proposal he never saw."""
    gw, _, link = memgw
    run = gw.create_run(SCRIPT, "script")
    req = (await gw.submit(run.id, "psu", "VOLT 2,(@2);:CURR 0.4,(@2);:OUTP ON,(@2)")).request
    assert req is not None
    real = gw.store

    def olga_edits() -> None:
        # Olga's whole grant, through the façade, inside Pete's read-to-swap window. Her
        # approval leaves the request incomplete, so her grant never suspends: one send()
        # runs it to its end (a StopIteration carrying her result).
        grant = gw.grant(req.id, OLGA, ["setpoint"], edits={"CH2.voltage": "9"},
                         proposal_hash=req.proposal_hash)
        with pytest.raises(StopIteration) as done:
            grant.send(None)
        assert done.value.value.missing, "Olga's approval alone must not complete it"

    gw.store = _CasRace(real, req.id, olga_edits)  # type: ignore[assignment]
    try:
        with pytest.raises(ProposalChanged) as changed:
            await gw.grant(req.id, PETE, ["output_enable"], proposal_hash=req.proposal_hash)
    finally:
        gw.store = real
    after = gw.get_request(req.id)
    assert changed.value.seen == req.proposal_hash
    assert changed.value.current == after.proposal_hash != req.proposal_hash
    assert after.status is Status.PENDING
    assert [a.kind.value for a in after.valid_approvals()] == ["setpoint"]
    assert "OUTP 1,(@2)" not in link.calls
    check_consistent(gw, link)


# ------------------------------------------------------------------ the state machine
MESSAGES = ["VOLT 1.5,(@1)", "CURR 0.2,(@2)", "VOLT 3,(@3);:OUTP ON,(@3)", "OUTP ON,(@1)",
            "*RST", "OUTP OFF,(@2)"]


class TakeoverMachine(RuleBasedStateMachine):
    """Random interleavings of submit, grant, deny, cancel, expire, take-over and release,
    front-panel changes and concurrent bursts, on the real Gateway."""

    requests = Bundle("requests")

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = Clock()
        self.gw, self.bench, self.link = memory_gateway(self.clock)
        self.run(self.gw.start())
        self.run_id = self.gw.create_run(SCRIPT, "script").id
        self.engineer = self.gw.create_run(Principal(name="olga", role=Role.OPERATOR),
                                           "engineer").id
        self.decided: dict[str, Status] = {}

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def attempt(self, coro: Coroutine[Any, Any, Any]) -> str:
        return str(self.run(_attempt(coro)))

    @rule(target=requests, message=st.sampled_from(MESSAGES), mine=st.booleans(),
          minutes=st.integers(1, 3))
    def submit(self, message: str, mine: bool, minutes: int) -> str:
        run_id = self.engineer if mine else self.run_id
        result = self.run(self.gw.submit(run_id, "psu", message, timeout_minutes=minutes))
        if result.request is None:
            return ""
        return str(result.request.id)

    @rule(req=requests, who=st.sampled_from([OLGA, PETE]),
          kinds=st.sets(st.sampled_from(["setpoint", "output_enable", "state"]), min_size=1),
          edit=st.sampled_from([None, "1", "2.5"]), shown=st.booleans())
    def grant(self, req: str, who: Principal, kinds: set[str], edit: str | None,
              shown: bool) -> None:
        """``shown``: the approver names the current proposal; otherwise one it never saw,
        which must approve nothing."""
        if not req:
            return
        current = self.gw.get_request(req)
        kinds = {k for k in kinds if k in {r.value for r in current.required}} or {
            current.required[0].value}
        edits = None
        if edit is not None and "setpoint" in kinds:
            target = next((a for a in current.actions if a.effect == "setpoint"
                           and a.field == "voltage"), None)
            edits = {f"CH{target.channel}.voltage": edit} if target else None
        seen = current.proposal_hash if shown else "0" * 64
        result = self.attempt(self.gw.grant(req, who, sorted(kinds), edits=edits,
                                            proposal_hash=seen))
        if not shown:
            assert result != "won", "an approval of a proposal its approver never saw"
            assert self.gw.get_request(req).approvals == current.approvals

    @rule(req=requests, who=st.sampled_from([OLGA, PETE]))
    def deny(self, req: str, who: Principal) -> None:
        if req:
            seen = self.gw.get_request(req).proposal_hash
            self.attempt(self.gw.deny(req, who, "not now", proposal_hash=seen))

    @rule(req=requests)
    def cancel(self, req: str) -> None:
        if req:
            self.attempt(self.gw.cancel(req, SCRIPT, "withdrawn"))

    @rule(seconds=st.sampled_from([10, 61, 200]))
    def time_passes(self, seconds: int) -> None:
        self.clock.advance(seconds=seconds)
        self.run(self.gw.sweep())

    @rule(ch=st.integers(1, 3), volts=st.sampled_from(["0.5", "4"]))
    def front_panel(self, ch: int, volts: str) -> None:
        self.bench.psu.handle_message(f"VOLT {volts},(@{ch})")

    @rule()
    def take_over_and_release(self) -> None:
        self.gw.take_over(self.run_id, OLGA, "looking")
        self.gw.release(self.run_id, PETE)

    @rule(req=consumes(requests))
    def burst(self, req: str) -> None:
        """Everything at once on one request: one of them wins, the others lose cleanly."""
        if not req:
            return
        current = self.gw.get_request(req)
        kinds = [k.value for k in current.required]
        seen = current.proposal_hash

        async def everyone() -> list[str]:
            return list(await asyncio.gather(
                _attempt(self.gw.grant(req, PETE, kinds[:1], proposal_hash=seen)),
                _attempt(self.gw.grant(req, OLGA, kinds[-1:], proposal_hash=seen)),
                _attempt(self.gw.deny(req, PETE, "no", proposal_hash=seen)),
                _attempt(self.gw.cancel(req, SCRIPT, "gone")),
                _attempt(self.gw.sweep())))
        self.run(everyone())

    @invariant()
    def one_consistent_outcome(self) -> None:
        check_consistent(self.gw, self.link)
        for req in self.gw.store.list_requests(limit=100_000):
            if req.id in self.decided:
                assert req.status is self.decided[req.id], "a decided request moved again"
            elif req.status in TERMINAL:
                self.decided[req.id] = req.status

    def teardown(self) -> None:
        self.run(self.gw.close())
        self.gw.store.close()
        self.loop.close()


TestTakeoverMachine = TakeoverMachine.TestCase
TestTakeoverMachine.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
