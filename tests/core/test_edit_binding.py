"""An approval voided by an edit stays void: an edit makes a new proposal, never an earlier
one again (docs/takeover.md, "Approve with changes").

The finding: ``VOLT 1,(@1);:OUTP ON,(@1)`` on a bench with ``two_person_output_enable``.
olga approved the setpoint (proposal H1); oscar approved the output enable with the edit
``CH1.voltage=5`` (H2: olga's approval stopped counting); then olga approved the output
enable with the edit ``CH1.voltage=1``. The proposal was H1 again, so olga's voided setpoint
approval counted again, and the grant's two-person check, made on the approvals before the
edit (oscar's), let her give the second half: both halves by one person were recorded as
the approvals of one proposal, and only the executor's last recheck stopped the write (the
request failed instead of asking for a second person). Without the two-person rule, an edit back
to an earlier value revived approvals given to it, though "approvals given to the old hash no
longer count". Each case checks CH1 on the simulator's own port.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench_gate.config import BenchConfig
from bench_gate.errors import PermissionDenied
from bench_gate.gateway import Gateway
from bench_gate.models import ApprovalKind, EventType, Principal, Role, Status
from bench_gate.store import SqliteStore

from ..conftest import Clock, own_port

OSCAR = Principal(name="oscar", role=Role.OPERATOR)


def ch1(sim: Any) -> tuple[str, float]:
    """CH1's output and voltage setting, read on the simulator's own port."""
    with own_port(sim.psu_resource_name, panel=True) as panel:
        return (str(panel.query("OUTP? (@1)")).strip(), float(panel.query("VOLT? (@1)")))


async def test_an_edit_back_never_lets_one_person_give_both_halves(
        gateway: Gateway, script: Principal, olga: Principal, sim: Any) -> None:
    gateway.config.policy.two_person_output_enable = True
    run = gateway.create_run(script, "script", goal="an edit back")
    req = (await gateway.submit(run.id, "psu", "VOLT 1,(@1);:OUTP ON,(@1)")).request
    assert req is not None
    first = req.proposal_hash
    await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=first)
    edited = await gateway.grant(req.id, OSCAR, ["output_enable"],
                                 edits={"CH1.voltage": "5"}, proposal_hash=first)
    second = edited.request.proposal_hash
    assert edited.missing == [ApprovalKind.SETPOINT]
    back = await gateway.grant(req.id, olga, ["output_enable"], edits={"CH1.voltage": "1"},
                               proposal_hash=second)
    # Her setpoint approval was voided by oscar's edit and stays so: she gave one half of
    # this proposal, the output enable; the setpoint needs someone else.
    assert back.request.status is Status.PENDING, back.message
    assert back.missing == [ApprovalKind.SETPOINT]
    assert [(a.kind, a.by) for a in back.request.valid_approvals()] == [
        (ApprovalKind.OUTPUT_ENABLE, "olga")]
    with pytest.raises(PermissionDenied, match="olga cannot approve both"):
        await gateway.grant(req.id, olga, ["setpoint"],
                            proposal_hash=back.request.proposal_hash)
    after = gateway.get_request(req.id)
    assert after.status is Status.PENDING and after.missing() == [ApprovalKind.SETPOINT]
    granted = [(e.data.get("by"), e.data.get("kind"), e.data.get("proposal_hash"))
               for e in gateway.store.journal(run.id, limit=100)
               if e.type is EventType.APPROVAL_GRANTED]
    assert ("olga", "setpoint", after.proposal_hash) not in granted
    assert ch1(sim) == ("0", 0.0)


async def test_an_edit_back_to_an_earlier_value_revives_no_approval(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: Any) -> None:
    run = gateway.create_run(script, "script", goal="an edit back")
    req = (await gateway.submit(run.id, "psu", "VOLT 1,(@1);:OUTP ON,(@1)")).request
    assert req is not None
    first = req.proposal_hash
    await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=first)
    edited = await gateway.grant(req.id, OSCAR, ["output_enable"],
                                 edits={"CH1.voltage": "5"}, proposal_hash=first)
    back = await gateway.grant(req.id, pete, ["output_enable"], edits={"CH1.voltage": "1"},
                               proposal_hash=edited.request.proposal_hash)
    # The same commands as first shown, yet a new proposal: olga's setpoint approval was
    # voided by oscar's edit and stays so; someone must approve the setpoint again.
    assert back.request.status is Status.PENDING, back.message
    assert back.missing == [ApprovalKind.SETPOINT]
    assert back.request.proposal_hash not in (first, edited.request.proposal_hash)
    assert [(a.kind, a.by) for a in back.request.valid_approvals()] == [
        (ApprovalKind.OUTPUT_ENABLE, "pete")]
    assert ch1(sim) == ("0", 0.0)
    done = await gateway.grant(req.id, olga, ["setpoint"],
                               proposal_hash=back.request.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.message
    assert ch1(sim) == ("1", 1.0)


async def test_an_edited_proposal_survives_a_restart_and_runs_once(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal,
        olga: Principal, sim: Any) -> None:
    """A guard for the revision in the hash: kept with the request, so an edited proposal
    approved after a restart still matches its hash at the last recheck and runs."""
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script", goal="an edit, then a restart")
        req = (await gw.submit(run.id, "psu", "VOLT 1,(@1);:OUTP ON,(@1)")).request
        assert req is not None
        edited = await gw.grant(req.id, OSCAR, ["output_enable"], edits={"CH1.voltage": "2"},
                                proposal_hash=req.proposal_hash)
    finally:
        await gw.close()
        gw.store.close()
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        again = gw.get_request(req.id)
        assert again.revision == 1 and again.proposal_hash == edited.request.proposal_hash
        done = await gw.grant(req.id, olga, ["setpoint"], proposal_hash=again.proposal_hash)
        assert done.request.status is Status.EXECUTED, done.message
        assert ch1(sim) == ("1", 2.0)
    finally:
        await gw.close()
        gw.store.close()
