"""A proposal hash names the request it was shown as. Two requests asking the same thing
from the same state (bot's 'VOLT 2,(@1)' with its rationale, bot2's with another) had one
hash: a grant naming the one olga was shown approved the other, never shown to her, and it
ran. Now the hash covers the request's id: the grant is refused (ProposalChanged) and
nothing is written."""

from __future__ import annotations

from typing import Any

import pytest

from bench_gate.errors import ProposalChanged
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Role, Status

from ..conftest import own_port


def ch1_volts(sim: Any) -> float:
    with own_port(sim.psu_resource_name, panel=True) as panel:
        return float(panel.query("VOLT? (@1)"))


async def test_a_hash_shown_for_one_request_never_grants_another(
        gateway: Gateway, script: Principal, olga: Principal, sim: Any) -> None:
    other = Principal(name="script-8", role=Role.REQUESTER)
    mine = gateway.create_run(script, "script", goal="rated 12 V")
    theirs = gateway.create_run(other, "script", goal="another DUT")
    shown = (await gateway.submit(mine.id, "psu", "VOLT 2,(@1)",
                                  rationale="the DUT is rated 12 V")).request
    unseen = (await gateway.submit(theirs.id, "psu", "VOLT 2,(@1)",
                                   rationale="no idea")).request
    assert shown is not None and unseen is not None
    assert shown.proposal_hash != unseen.proposal_hash
    with pytest.raises(ProposalChanged):
        await gateway.grant(unseen.id, olga, ["setpoint"], proposal_hash=shown.proposal_hash)
    assert gateway.get_request(unseen.id).approvals == []
    assert ch1_volts(sim) == 0.0
    done = await gateway.grant(shown.id, olga, ["setpoint"], proposal_hash=shown.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.message
    assert ch1_volts(sim) == 2.0
