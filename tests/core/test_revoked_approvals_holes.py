"""Attacks on "an approval lasts only as long as its token" (docs/takeover.md), each one a
way a revoked token's approval still reached the instrument, or still counted in what people
are shown. Each proves the instrument on the simulator's own port."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status

from .test_revoked_approvals import operator, output_on, revoke


async def until(check: Callable[[], Any], seconds: float = 5.0) -> Any:
    deadline = time.monotonic() + seconds
    while not (found := check()):
        assert time.monotonic() < deadline, "gave up waiting"
        await asyncio.sleep(0.02)
    return found


async def test_a_token_revoked_while_its_approved_write_waits_for_the_lane_writes_nothing(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    """The last approval commits the request ``executing`` while the lane is busy (a slow
    reading, a safe action elsewhere); the first approver's token is revoked meanwhile.
    The checks before the lane turn had passed, and the lane turn's own recheck did not
    look at tokens: the write energized CH1 on a revoked approval."""
    olga, oscar = operator(gateway, "olga"), operator(gateway, "oscar")
    run = gateway.create_run(script, "script")
    before = Decimal(front_panel.query("VOLT? (@1)"))
    req = (await gateway.submit(run.id, "psu", "VOLT 2.5,(@1);:OUTP ON,(@1)")).request
    assert req is not None
    await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    lane = gateway.instruments["psu"].lane
    holding = asyncio.ensure_future(lane.run(lambda link: asyncio.sleep(1.0)))
    await asyncio.sleep(0.1)
    granting = asyncio.ensure_future(gateway.grant(req.id, oscar, ["output_enable"],
                                                   proposal_hash=req.proposal_hash))
    await until(lambda: gateway.get_request(req.id).status is Status.EXECUTING)
    revoke(gateway, "olga")
    await holding
    final = (await granting).request
    assert final.status is Status.FAILED, (final.status, final.outcome)
    assert "the setpoint approval by olga no longer counts" in (final.outcome or "")
    assert Decimal(front_panel.query("VOLT? (@1)")) == before and not output_on(front_panel)


def _errors(client: Any) -> list[str]:
    out = []
    while (err := client.query("SYST:ERR?")) != '+0,"No error"':
        out.append(err)
    return out


async def test_an_approval_waiting_for_a_resend_stops_showing_approved_once_revoked(
        open_client: Callable[..., Any], gateway: Gateway, front_panel: Any) -> None:
    """Through the socket door with ``GATE:HOLD REFUSE``: the write is approved and waits
    for its requester's resend; the approver's token is revoked on the store. What the
    script and the console were shown said ``approved`` until the resend came (if ever):
    the sweep now ends it, failed, nothing written, and the resend runs nothing."""
    from tests.doors.proxy.test_proxy import in_thread, next_pending
    olga = operator(gateway, "olga")
    psu = open_client(timeout=3000)

    def hold() -> list[str]:
        psu.write("GATE:HOLD REFUSE")
        psu.write("VOLT 1.5,(@1)")
        return _errors(psu)

    await in_thread(hold)
    req = await next_pending(gateway)
    granted = await gateway.grant(req.id, olga, list(req.required),
                                  proposal_hash=req.proposal_hash)
    assert granted.request.status is Status.APPROVED
    revoke(gateway, "olga")
    await until(lambda: gateway.get_request(req.id).status is not Status.APPROVED, 3)
    final = gateway.get_request(req.id)
    assert final.status is Status.FAILED, final.outcome
    assert "the setpoint approval by olga no longer counts" in (final.outcome or "")
    status = await in_thread(psu.query, "GATE:STAT?")
    assert not status.startswith("APPROVED"), status

    def resend() -> list[str]:
        psu.write("VOLT 1.5,(@1)")
        return _errors(psu)

    await in_thread(resend)
    assert Decimal(front_panel.query("VOLT? (@1)")) == 0
    assert gateway.get_request(req.id).status is Status.FAILED
