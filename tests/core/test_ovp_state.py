"""Over-voltage protection turned off on the E36312A (``VOLT:PROT:STAT OFF``): with it off,
the OVP level trips nothing, so a bench's ``ovp`` limit bounds nothing either. The state is
a profile field (``guards: ovp``): read in every snapshot, shown to the approver, judged
before a write is sent and on the read-back; the simulator trips only while it is on.
Proven on the simulator's own port (``front_panel``).
"""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import pytest

from bench_gate.config import ChannelLimits
from bench_gate.gateway import Gateway
from bench_gate.models import ApprovalKind, Principal, Status
from tests.core.test_envelope_state import grant_all, panel

OVP_LIMITS = ChannelLimits(voltage=Decimal(6), current=Decimal(1), ovp=Decimal("6.6"))


def test_the_simulated_supply_trips_only_while_its_protection_is_on(front_panel: Any) -> None:
    assert panel(front_panel, "VOLT:PROT:STAT? (@1)") == 1  # on after *RST
    for command in ("VOLT:PROT 2,(@1)", "VOLT 3,(@1)", "OUTP 1,(@1)"):
        front_panel.write(command)
    assert panel(front_panel, "VOLT:PROT:TRIP? (@1)") == 1
    assert panel(front_panel, "OUTP? (@1)") == 0
    for command in ("VOLT:PROT:STAT 0,(@1)", "VOLT:PROT:CLE (@1)", "OUTP 1,(@1)"):
        front_panel.write(command)
    assert panel(front_panel, "OUTP? (@1)") == 1  # 3 V over a 2 V OVP level, untripped
    assert panel(front_panel, "VOLT:PROT:TRIP? (@1)") == 0


async def test_turning_it_off_is_held_shown_and_refused_on_a_live_channel(
        gateway: Gateway, script: Principal, front_panel: Any) -> None:
    gateway.config.envelope["psu"][1] = OVP_LIMITS
    run = gateway.create_run(script, "script")
    # Off: held for every approval, and the approver reads what it does.
    req = (await gateway.submit(run.id, "psu", "VOLT:PROT:STAT OFF,(@1)")).request
    assert req is not None
    assert set(req.required) == {ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE,
                                 ApprovalKind.STATE}
    assert req.actions[0].words == (
        "CH1 over-voltage protection ON → OFF (turns over-voltage protection on or off: "
        "off, the OVP level trips nothing)")
    assert req.handoff["snapshot"]["ch1.ovp_enabled"] == "1"
    # On: turning it off, or energizing with it off at the panel, leaves the ovp limit
    # bounding nothing: refused before anything is sent.
    front_panel.write("VOLT 1,(@1);:OUTP 1,(@1)")
    result = await gateway.submit(run.id, "psu", "VOLT:PROT:STAT OFF,(@1)")
    assert result.status == "refused" and result.code == -222, result
    assert "CH1 over-voltage protection is OFF: the bench's ovp limit bounds this " \
           "channel only with it on" in result.reason
    assert panel(front_panel, "VOLT:PROT:STAT? (@1)") == 1
    front_panel.write("OUTP 0,(@1);:VOLT:PROT:STAT 0,(@1)")
    result = await gateway.submit(run.id, "psu", "OUTP ON,(@1)")
    assert result.status == "refused" and "over-voltage protection is OFF" in result.reason
    assert panel(front_panel, "OUTP? (@1)") == 0


async def test_a_read_back_that_finds_it_off_on_a_live_channel_makes_it_safe(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any) -> None:
    """Turned off at the panel under a live output: the read-back of any write (here one
    whose effect the gateway cannot predict, so judged by its read-back alone) finds it and
    switches the output off."""
    gateway.config.envelope["psu"][1] = OVP_LIMITS
    # The write's read-back, not the watch: on a busy machine the watch found the panel's
    # change first, and the write went stale (the output read off since approval). The
    # check already due runs first; the next one is an hour away.
    gateway.config.policy.watch_seconds = 3600
    seen = gateway.watch.checks
    for _ in range(500):
        if gateway.watch.checks > seen:
            break
        await asyncio.sleep(0.01)
    assert gateway.watch.checks > seen, "the watch's due check never ran"
    front_panel.write("VOLT 1,(@1);:OUTP 1,(@1);:VOLT:PROT:STAT 0,(@1)")
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "TRIG:SOUR BUS,(@2)")).request
    assert req is not None
    final = (await grant_all(gateway, req.id, olga)).request
    assert "over-voltage protection is OFF" in (final.outcome or ""), final.outcome
    assert panel(front_panel, "OUTP? (@1)") == 0


@pytest.mark.parametrize("limits", [ChannelLimits(voltage=Decimal(6), current=Decimal(1))])
async def test_without_an_ovp_limit_the_state_is_not_judged(
        gateway: Gateway, script: Principal, olga: Principal, front_panel: Any,
        limits: ChannelLimits) -> None:
    """A bench with no ovp limit on the channel relies on the voltage limit alone: the
    protection's state is shown, not judged."""
    gateway.config.envelope["psu"][1] = limits
    front_panel.write("VOLT:PROT:STAT 0,(@1)")
    run = gateway.create_run(script, "script")
    req = (await gateway.submit(run.id, "psu", "VOLT 1,(@1);:OUTP ON,(@1)")).request
    assert req is not None
    assert (await grant_all(gateway, req.id, olga)).request.status is Status.EXECUTED
    assert panel(front_panel, "OUTP? (@1)") == 1
