"""The takeover flow's open items from earlier reviews, each proven on the simulator's own
port (never the gateway's word for it) and closed as a class (docs/reliability.md section 7).

1. Expiry at the last moment: a granted request whose expiry passes while it waits for the
   instrument (the executor's turn, the lane's turn) is expired there, never written.
2. A grant's caller that goes away (an HTTP client gone, an MCP call cancelled) while the
   write waits for the lane: the decision was made and is durable, so the write runs to its
   end detached from the caller; it never stays ``executing`` with nothing written.
4. The E3631A's ``*RCL`` restores the selected output with the rest of the stored state
   (User's Guide, chapter 4, ``*SAV``): a bare ``VOLT`` after it means the recalled output.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bench_gate.config import BenchConfig, InstrumentConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status, TakeoverRequest
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import Clock, own_port, served_bench


@pytest.fixture
def e3631a_sim() -> Iterator[SimServedThread]:
    with SimServedThread("e3631a") as served:
        yield served


@pytest.fixture
def config(sim: SimBenchThread, e3631a_sim: SimServedThread) -> BenchConfig:
    cfg = served_bench(sim, "e3631a", e3631a_sim, "e3631a")
    assert isinstance(cfg.instruments[-1], InstrumentConfig)
    return cfg


def _volts(front_panel: Any, channel: int) -> float:
    return float(front_panel.query(f"VOLT? (@{channel})"))


async def _until(check: Callable[[], bool], seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")


def _block(gateway: Gateway) -> tuple[asyncio.Event, asyncio.Future[None]]:
    """The psu's lane busy with another job until the event is set."""
    release = asyncio.Event()

    async def busy(link: Any) -> None:
        await release.wait()

    return release, asyncio.ensure_future(gateway.instrument("psu").lane.run(busy))


# ------------------------------------------------------------------ 1. expiry at the last moment
async def test_a_grant_whose_expiry_passes_while_it_waits_for_the_lane_never_runs(
        gateway: Gateway, script: Principal, olga: Principal, clock: Clock,
        front_panel: Any) -> None:
    """``VOLT 4,(@1)`` (5 minutes to decide) granted by olga in its fourth minute while the
    psu's lane was busy: the grant committed it ``executing`` and queued the recheck and
    write; the lane was free again only after the expiry, and the write ran (4 V on the
    simulator). An expiry is a denial: it is checked again on the write's own lane turn."""
    run = gateway.create_run(script, "script")
    held = await gateway.submit(run.id, "psu", "VOLT 4,(@1)", timeout_minutes=5)
    assert held.request is not None and held.status == "pending"
    req = held.request
    release, blocker = _block(gateway)
    clock.advance(minutes=4)
    grant = asyncio.ensure_future(gateway.grant(req.id, olga, ["setpoint"],
                                                proposal_hash=req.proposal_hash))
    await _until(lambda: gateway.get_request(req.id).status is not Status.PENDING)
    clock.advance(minutes=2)  # past its expiry while the write waits for the lane
    release.set()
    await blocker
    done = (await grant).request
    assert done.status is Status.EXPIRED, done.outcome
    assert "nothing was written" in (done.outcome or "")
    assert _volts(front_panel, 1) == 0


async def test_a_grant_whose_expiry_passes_while_another_write_runs_never_runs(
        gateway: Gateway, script: Principal, olga: Principal, clock: Clock,
        front_panel: Any) -> None:
    """The long way: ``VOLT 2,(@2)`` is granted while ``VOLT 1,(@1)`` executes on the same
    psu, so it is recorded approved and waits for the executor's turn; its expiry passes
    meanwhile. It ends expired with nothing written; the first write runs."""
    run = gateway.create_run(script, "script")
    first = (await gateway.submit(run.id, "psu", "VOLT 1,(@1)")).request
    second = (await gateway.submit(run.id, "psu", "VOLT 2,(@2)", timeout_minutes=5)).request
    assert first is not None and second is not None
    release, blocker = _block(gateway)
    one = asyncio.ensure_future(gateway.grant(first.id, olga, ["setpoint"],
                                              proposal_hash=first.proposal_hash))
    await _until(lambda: gateway.get_request(first.id).status is Status.EXECUTING)
    clock.advance(minutes=4)
    two = asyncio.ensure_future(gateway.grant(second.id, olga, ["setpoint"],
                                              proposal_hash=second.proposal_hash))
    await _until(lambda: gateway.get_request(second.id).status is Status.APPROVED)
    clock.advance(minutes=2)
    release.set()
    await blocker
    assert (await one).request.status is Status.EXECUTED
    late = (await two).request
    assert late.status is Status.EXPIRED, late.outcome
    assert _volts(front_panel, 1) == 1 and _volts(front_panel, 2) == 0


# ------------------------------------------------------------------ 2. a grant's caller gone
async def test_a_grant_whose_caller_goes_away_while_the_write_waits_still_runs_to_its_end(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    """olga's grant of ``VOLT 4,(@1)`` (an HTTP request, an MCP call) is cancelled while the
    write waits for the psu's lane: the request stayed ``executing`` with nothing written
    until a restart reconciled it. Her decision was made and is durable, and a gone
    approver's connection is no denial: the write runs to its end, detached from her call."""
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 4,(@1)")).request
    assert req is not None
    release, blocker = _block(gateway)
    grant = asyncio.ensure_future(gateway.grant(req.id, olga, ["setpoint"],
                                                proposal_hash=req.proposal_hash))
    await _until(lambda: gateway.get_request(req.id).status is Status.EXECUTING)
    grant.cancel()  # the approver's client went away
    await asyncio.sleep(0.05)
    release.set()
    await blocker
    done = await gateway.wait(req.id, timeout=5, follow=False)
    assert done.status is Status.EXECUTED, done.outcome
    assert _volts(front_panel, 1) == 4


async def test_a_run_closed_while_its_granted_write_waits_for_the_lane_runs_nothing(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    """The requester's side: ``VOLT 4,(@1)`` granted, its write queued behind a busy lane,
    and the requester's run closed (its socket connection or MCP session gone) before the
    write's turn. The grant had already committed it ``executing``, which closing a run does
    not cancel, and the write ran for a client that was gone. The run is checked again on
    the write's own lane turn: it ends failed, nothing written."""
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 4,(@1)")).request
    assert req is not None
    release, blocker = _block(gateway)
    grant = asyncio.ensure_future(gateway.grant(req.id, olga, ["setpoint"],
                                                proposal_hash=req.proposal_hash))
    await _until(lambda: gateway.get_request(req.id).status is Status.EXECUTING)
    gateway.close_run(run.id, "client gone: the connection closed")
    release.set()
    await blocker
    done = (await grant).request
    assert done.status is Status.FAILED, done.outcome
    assert "run closed" in (done.outcome or "") and "nothing was written" in done.outcome
    assert _volts(front_panel, 1) == 0


# ------------------------------------------------------------------ 4. *RCL and the selection
async def _grant_all(gateway: Gateway, req: TakeoverRequest, *people: Principal) -> None:
    for who, kind in zip(people * 3, [k.value for k in req.missing()], strict=False):
        await gateway.grant(req.id, who, [kind], proposal_hash=req.proposal_hash)


async def test_a_recall_selects_the_output_its_state_holds(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        e3631a_sim: SimServedThread) -> None:
    """E3631A User's Guide, chapter 4, ``*SAV``: the stored state "remembers" INST[:SEL]
    with the levels, so after ``*RCL 1`` of a state stored with P25V selected, a bare
    ``VOLT 3`` means P25V on the instrument. The run's selection (per run, never sent)
    stayed on P6V, so the gateway set P6V to 3 V, a rail the script never meant. The
    selection is read after the recall runs; a bare unit after it in the same message is
    refused (-221), never guessed. Every approval granted; the simulator's own port."""
    with own_port(e3631a_sim.resource_name, panel=True) as panel:
        panel.write("INST:NSEL 2")
        panel.write("*SAV 1")  # stored at the panel with P25V selected
        panel.write("INST:NSEL 1")
    run = gateway.create_run(script, "script", goal="the stored set-up, then a new level")
    assert (await gateway.submit(run.id, "e3631a", "INST:SEL P6V")).status == "executed"
    recall = await gateway.submit(run.id, "e3631a", "*RCL 1")
    assert recall.request is not None
    await _grant_all(gateway, recall.request, olga, pete)
    assert gateway.get_request(recall.request.id).status is Status.EXECUTED
    held = await gateway.submit(run.id, "e3631a", "VOLT 3")
    assert held.request is not None, held
    assert [a.channel for a in held.request.actions] == [2], held.request.actions
    await _grant_all(gateway, held.request, olga, pete)
    with own_port(e3631a_sim.resource_name) as port:
        assert float(port.query("INST:NSEL 2;:VOLT?")) == 3
        assert float(port.query("INST:NSEL 1;:VOLT?")) == 0
    same = await gateway.submit(run.id, "e3631a", "*RCL 1;:VOLT 4")
    assert same.status == "refused" and same.code == -221, same
    assert "INST:NSEL <n>" in same.reason


async def test_a_state_saved_through_the_gateway_keeps_the_runs_selection(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        e3631a_sim: SimServedThread) -> None:
    """The other half: a script selected P25V and stored the state (``*SAV 1``); the
    gateway keeps a run's selection and never sends it, so the supply stored the output it
    had selected itself (P6V), and after ``*RCL 1`` the script's bare ``VOLT 3`` was judged
    and written for P6V. ``*SAV`` now goes out after the run's own selection
    (``INST:NSEL 2``, then ``*SAV 1``), so the recall restores what the script stored."""
    run = gateway.create_run(script, "script", goal="store a set-up, recall it")
    for message in ("INST:SEL P25V", "*SAV 1", "INST:SEL P6V", "VOLT 1", "*RCL 1", "VOLT 3"):
        result = await gateway.submit(run.id, "e3631a", message)
        if result.request is not None:
            await _grant_all(gateway, result.request, olga, pete)
            done = gateway.get_request(result.request.id)
            assert done.status is Status.EXECUTED, (message, done.outcome)
        else:
            assert result.status == "executed", (message, result)
    with own_port(e3631a_sim.resource_name) as port:
        assert float(port.query("INST:NSEL 2;:VOLT?")) == 3
        assert float(port.query("INST:NSEL 1;:VOLT?")) == 0  # the recall's stored 0 V


# ------------------------------------------------------------------ 5. what a receipt says was sent
@pytest.fixture
def e3631a_heard(e3631a_sim: SimServedThread) -> Iterator[list[str]]:
    """Every message the simulated E3631A got, in order, whoever sent it."""
    got: list[str] = []
    inst: Any = e3631a_sim.instrument
    real = inst.handle_message

    def spy(message: str, *args: Any) -> str | None:
        got.append(message)
        return real(message, *args)  # type: ignore[no-any-return]

    inst.handle_message = spy
    yield got
    inst.handle_message = real


def _within(part: list[str], whole: list[str]) -> bool:
    return any(whole[i:i + len(part)] == part for i in range(len(whole) - len(part) + 1))


async def test_a_receipt_shows_exactly_what_the_instrument_got(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        e3631a_heard: list[str]) -> None:
    """``APPL P25V,5,0.1`` on the E3631A: the receipt's ``sent`` read ``INST:NSEL 2``,
    ``VOLT 5.0,(@2)``, ``CURR 0.1,(@2)``: a selection the gateway keeps per run and never
    sends, and two texts the supply never got (it takes no channel list: the gateway sends
    its own ``INST:NSEL 2`` before each). Now ``sent`` is what the instrument got, in order,
    and ``lines`` marks what the gateway added or kept back, with why."""
    run = gateway.create_run(script, "script", goal="the +25V rail")
    held = await gateway.submit(run.id, "e3631a", "APPL P25V,5,0.1")
    assert held.request is not None
    e3631a_heard.clear()
    await _grant_all(gateway, held.request, olga, pete)
    done = gateway.get_request(held.request.id)
    assert done.status is Status.EXECUTED and done.receipt is not None, done.outcome
    receipt = done.receipt
    assert receipt.sent == ["INST:NSEL 2", "VOLT 5.0", "INST:NSEL 2", "CURR 0.1"]
    assert _within(receipt.sent, e3631a_heard), (receipt.sent, e3631a_heard)
    kept, *wire = receipt.lines
    assert kept.text == "INST:NSEL 2" and not kept.sent and "kept per run" in kept.why
    assert [ln.added for ln in wire] == [True, False, True, False]
    assert all("added by the gateway" in ln.why for ln in wire if ln.added)


async def test_a_receipt_never_lists_what_the_gateway_answered_itself(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    """``*CLS;VOLT 3,(@1)``: ``*CLS`` is answered by the gateway (the connection's own error
    view) and never sent, yet the receipt listed it as sent."""
    run = gateway.create_run(script, "script")
    held = await gateway.submit(run.id, "psu", "*CLS;VOLT 3,(@1)")
    assert held.request is not None
    await _grant_all(gateway, held.request, olga)
    receipt = gateway.get_request(held.request.id).receipt
    assert receipt is not None
    assert receipt.sent == ["VOLT 3.0,(@1)"]
    assert [(ln.text, ln.sent) for ln in receipt.lines] == [("*CLS", False),
                                                           ("VOLT 3.0,(@1)", True)]
    assert "answered by the gateway" in receipt.lines[0].why
    assert _volts(front_panel, 1) == 3
