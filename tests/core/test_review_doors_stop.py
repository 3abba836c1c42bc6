"""Hostile review (doors): a setpoint approved before the gateway made a channel safe.

Sent as one message, ``VOLT 5,(@1);:OUTP ON,(@1)`` held when an emergency stop is pressed
is cancelled: nothing approved before the stop runs after it (docs/interlocks.md, step 3;
docs/plans.md). Sent as two, the setpoint half outlived the stop: ``VOLT 5,(@1)`` approved
and run, then the stop, cleared, and ``OUTP ON,(@1)`` needed only its output enable,
standing on the setpoint approved before the stop: one click energized the DUT at a level
nobody had looked at since something looked wrong. So with the gateway's own safe action
for a breach or a lost client's lease: the plans over those channels end ("a person looks
first"), and the setpoint in force there ends with them. Proven on the simulator's own port.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench_gate.gateway import Gateway
from bench_gate.models import ApprovalKind, Principal, Status
from tests.core.test_review_holes_2 import _everything


async def _energize_after(gateway: Gateway, script: Principal, olga: Principal,
                          pete: Principal, front_panel: Any, channel: int) -> Any:
    """VOLT on ``channel`` approved (olga) and run; then the emergency stop, cleared."""
    limit = "0.5" if channel > 1 else "1"
    run = gateway.create_run(script, "script", goal="power the DUT")
    done = await _everything(gateway, run.id, "psu",
                             f"VOLT 5,(@{channel});:CURR {limit},(@{channel})", olga)
    assert done.request.status is Status.EXECUTED, done.request.outcome
    await gateway.emergency_stop(olga, "api")
    gateway.clear_stop(olga)
    assert front_panel.query(f"OUTP? (@{channel})") == "0"
    fresh = gateway.create_run(script, "script", goal="power the DUT again")
    return await gateway.submit(fresh.id, "psu", f"OUTP ON,(@{channel})")


@pytest.mark.parametrize("channel", [1, 2, 3])
async def test_an_output_enable_after_a_stop_needs_its_setpoint_again(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any, channel: int) -> None:
    held = await _energize_after(gateway, script, olga, pete, front_panel, channel)
    req = held.request
    assert req is not None and held.status == "pending", held
    assert ApprovalKind.SETPOINT in req.missing(), req.missing()
    assert not req.handoff.get("setpoint_cover"), req.handoff.get("setpoint_cover")
    # One click, the output enable alone, energizes nothing.
    done = await gateway.grant(req.id, pete, ["output_enable"],
                               proposal_hash=req.proposal_hash)
    assert done.request.status is Status.PENDING, done.request.outcome
    assert front_panel.query(f"OUTP? (@{channel})") == "0"


async def test_with_both_approvals_after_the_stop_it_runs(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any) -> None:
    """The way that works: both halves, given after the stop."""
    held = await _energize_after(gateway, script, olga, pete, front_panel, 1)
    req = held.request
    await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    done = await gateway.grant(req.id, pete, ["output_enable"],
                               proposal_hash=req.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.request.outcome
    assert front_panel.query("OUTP? (@1)") == "1"


async def test_a_setpoint_approved_after_the_stop_stands(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any) -> None:
    """Only what was approved before the safe action ends: a setpoint approved after it is
    in force as ever, and the output enable alone switches the channel on."""
    held = await _energize_after(gateway, script, olga, pete, front_panel, 1)
    await gateway.cancel(held.request.id, script)
    run = gateway.create_run(script, "script", goal="again")
    again = await _everything(gateway, run.id, "psu", "VOLT 4,(@1)", olga)
    assert again.request.status is Status.EXECUTED, again.request.outcome
    on = await gateway.submit(run.id, "psu", "OUTP ON,(@1)")
    assert on.request.missing() == [ApprovalKind.OUTPUT_ENABLE], on.request.missing()


async def test_an_output_enable_after_a_breach_made_safe_needs_its_setpoint_again(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any) -> None:
    """The gateway's own safe action (here the envelope watch, for a 2 A current limit
    turned at the panel) ends the setpoint in force on the channel: turned back to the
    approved 1 A, the channel is not switched on again with one click."""
    run = gateway.create_run(script, "script", goal="power the DUT")
    on = await _everything(gateway, run.id, "psu", "VOLT 5,(@1);:OUTP ON,(@1)", olga, pete)
    assert on.request.status is Status.EXECUTED, on.request.outcome
    front_panel.write("CURR 2,(@1)")
    assert front_panel.query("*OPC?") == "1"
    assert await gateway.watch.check(gateway.core.instrument("psu")) is not None
    assert front_panel.query("OUTP? (@1)") == "0"
    front_panel.write("CURR 1,(@1)")
    assert front_panel.query("*OPC?") == "1"
    again = await gateway.submit(run.id, "psu", "OUTP ON,(@1)")
    req = again.request
    assert req is not None and ApprovalKind.SETPOINT in req.missing(), again
    done = await gateway.grant(req.id, pete, ["output_enable"],
                               proposal_hash=req.proposal_hash)
    assert done.request.status is Status.PENDING, done.request.outcome
    assert front_panel.query("OUTP? (@1)") == "0"
