"""Each action is shown from the value it finds, the one the units before it in the same
message leave, not the snapshot's: 'VOLT 5.9,(@1);VOLT 0.1,(@1)' read '0.000 V → 5.900 V'
then '0.000 V → 0.100 V', as if the second unit only nudged a channel at 0 V, and the
approval's meaning journaled those words. On a live output the second unit takes the DUT
from 5.9 V down to 0.1 V: that is what the approver must read. An edit re-derives them."""

from __future__ import annotations

from typing import Any

from bench_gate.gateway import Gateway
from bench_gate.models import EventType, Principal, Status

from ..conftest import own_port


def ch1_volts(sim: Any) -> float:
    with own_port(sim.psu_resource_name, panel=True) as panel:
        return float(panel.query("VOLT? (@1)"))


async def test_a_unit_is_shown_from_the_value_the_units_before_it_leave(
        gateway: Gateway, script: Principal, olga: Principal, sim: Any) -> None:
    run = gateway.create_run(script, "script", goal="two steps on one channel")
    req = (await gateway.submit(run.id, "psu", "VOLT 5.9,(@1);VOLT 0.1,(@1)")).request
    assert req is not None
    assert [a.words for a in req.actions] == [
        "CH1 voltage setpoint 0.000 V → 5.900 V",
        "CH1 voltage setpoint 5.900 V → 0.100 V"]
    # The handoff the doors show (API, console, CLI) is made from the same actions.
    assert [a["words"] for a in req.handoff["actions"]] == [a.words for a in req.actions]

    edited = await gateway.grant(req.id, olga, ["setpoint"], edits={"CH1.voltage": "2"},
                                 proposal_hash=req.proposal_hash)
    assert edited.request.status is Status.EXECUTED, edited.message
    assert [a.words for a in edited.request.actions] == [
        "CH1 voltage setpoint 0.000 V → 2.000 V",
        "CH1 voltage setpoint 2.000 V → 2.000 V"]
    granted = [e for e in gateway.journal(run.id) if e.type is EventType.APPROVAL_GRANTED]
    assert "CH1 voltage setpoint 2.000 V → 2.000 V" in granted[-1].data["meaning"]
    assert ch1_volts(sim) == 2.0


async def test_the_approval_means_the_steps_as_they_run(
        gateway: Gateway, script: Principal, olga: Principal, sim: Any) -> None:
    run = gateway.create_run(script, "script", goal="down again")
    req = (await gateway.submit(run.id, "psu", "VOLT 4,(@1);VOLT 1,(@1)")).request
    assert req is not None
    done = await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.message
    granted = [e for e in gateway.journal(run.id) if e.type is EventType.APPROVAL_GRANTED]
    assert granted[-1].data["meaning"].startswith(
        "I approve the setpoint: CH1 voltage setpoint 0.000 V → 4.000 V; "
        "CH1 voltage setpoint 4.000 V → 1.000 V")
    assert ch1_volts(sim) == 1.0
