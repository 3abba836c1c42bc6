"""The takeover flow's open items from earlier reviews, each proven on the simulator's own
port (never the gateway's word for it) and closed as a class (docs/reliability.md section 7).

1. Expiry at the last moment: a granted request whose expiry passes while it waits for the
   instrument (the executor's turn, the lane's turn) is expired there, never written.
2. A grant's caller that goes away (an HTTP client gone, an MCP call cancelled) while the
   write waits for the lane: the decision was made and is durable, so the write runs to its
   end detached from the caller; it never stays ``executing`` with nothing written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from tests.conftest import Clock


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
    assert "run is closed" in (done.outcome or "") and "nothing was written" in done.outcome
    assert _volts(front_panel, 1) == 0
