"""A lost client never leaves a bench energized unattended (leases).

A pyvisa script energizes CH1 through the socket door inside a plan and is then killed:
with ``on_client_lost = "safe"`` the output is off within ``lease_seconds`` + 1 s, seen on
the simulator's own port. A client still connected, or one that heartbeats, is never cut
off; with ``hold`` the state stays and the loss is journaled and announced."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from bench_gate.gateway import Gateway
from bench_gate.models import EventType, Principal, Status
from tests.doors.proxy.test_proxy import in_thread

LEASE = 1.5


async def until(check: Callable[[], bool], seconds: float) -> float:
    """Seconds until ``check()`` holds (polling), or fail after ``seconds``."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < seconds, "did not happen in time"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


def on(front_panel: Any) -> bool:
    return int(front_panel.query("OUTP? (@1)")) == 1


async def plan_and_energize(gateway: Gateway, client: Any, olga: Principal) -> str:
    def ask_plan() -> None:
        client.write("GATE:PLAN (@1),0,5,0.5,NONE,ON,20,30")

    await in_thread(ask_plan)
    deadline = time.monotonic() + 10
    while not (pending := gateway.list_requests(status=Status.PENDING)):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    plan = pending[0]
    await gateway.grant(plan.id, olga, ["setpoint", "output_enable"],
                        proposal_hash=plan.proposal_hash)

    def energize() -> str:
        assert client.query("*OPC?") == "1"  # the plan is decided
        client.write("VOLT 2,(@1);:CURR 0.4,(@1);:OUTP ON,(@1)")
        assert client.query("*OPC?") == "1"
        return str(client.query("GATE:RUN?")).strip('"')

    return await in_thread(energize)


async def test_a_killed_script_leaves_nothing_energized(
        gateway: Gateway, open_client: Callable[..., Any], olga: Principal,
        front_panel: Any) -> None:
    gateway.config.policy.lease_seconds = LEASE
    gateway.config.policy.on_client_lost = "safe"
    client = open_client("psu")
    run_id = await plan_and_energize(gateway, client, olga)
    assert on(front_panel)
    assert [lease["channels"] for lease in gateway.leases()] == [[1]]
    await asyncio.sleep(LEASE + 0.5)
    assert on(front_panel), "a connected client renews its lease by staying connected"
    client.close()  # the script is gone
    took = await until(lambda: not on(front_panel), LEASE + 1.0 + 0.6)
    assert took <= LEASE + 1.0 + 0.6

    def lost_events() -> list[dict[str, Any]]:
        return [e.data for e in gateway.store.journal(run_id, limit=500)
                if e.type is EventType.LEASE_EXPIRED]

    # The safe action reads the output back before it journals: the supply reads off a
    # moment before the event is written (the full suite once caught it in between).
    await until(lambda: bool(lost_events()), 2.0)
    lost = lost_events()
    assert lost and lost[0]["sent"] == ["OUTP:DEL:FALL 0.0,(@1)", "OUTP 0,(@1)"]
    assert lost[0]["policy"] == "safe"


async def test_heartbeats_keep_it_and_hold_only_alerts(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    gateway.config.policy.lease_seconds = LEASE
    gateway.config.policy.on_client_lost = "hold"
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 1,(@1);:OUTP ON,(@1)")).request
    assert req is not None
    await gateway.grant(req.id, olga, ["setpoint", "output_enable"],
                        proposal_hash=req.proposal_hash)
    for _ in range(3):  # an HTTP client heartbeating outlives several terms
        await asyncio.sleep(LEASE / 2)
        gateway.heartbeat(run.id, script)
    assert gateway.leases() and on(front_panel)
    async with gateway.subscribe() as events:
        await until(lambda: not gateway.leases(), LEASE + 1.6)
        alerts = []
        while not events.empty():
            alerts.append(events.get_nowait())
    assert on(front_panel), "hold keeps the state"
    assert any(a.get("alert") == "client_lost" for a in alerts)
    kinds = [e.type for e in gateway.store.journal(run.id, limit=500)]
    assert EventType.LEASE_EXPIRED in kinds
