"""A suspended run is released by another person than its requester.

A run is suspended after too many denials (or by an emergency stop) so that another person
looks at it. An operator can also be a run's requester (an engineer running their own
script): they may end their own takeover of it, never its suspension, and never a takeover
another operator holds (nor turn either into a takeover of their own). Identities compare
normalized (``Olga`` and ``olga`` are one person).
"""

from __future__ import annotations

import pytest

from bench_gate.errors import PermissionDenied
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Role, RunStatus


async def suspended_run(gw: Gateway, requester: Principal, denier: Principal) -> str:
    """A run of ``requester`` that ``denier`` suspended by denying it three times."""
    run = gw.create_run(requester, "script")
    for i in range(gw.config.policy.denials_in_a_row):
        req = (await gw.submit(run.id, "psu", f"VOLT {i + 1},(@1)")).request
        assert req is not None
        await gw.deny(req.id, denier, f"no {i}", proposal_hash=req.proposal_hash)
    assert gw.get_run(run.id).status is RunStatus.SUSPENDED
    return run.id


@pytest.mark.parametrize("spelling", ["olga", "Olga", " OLGA "])
async def test_an_operator_cannot_release_the_suspension_of_their_own_run(
        gateway: Gateway, olga: Principal, pete: Principal, spelling: str) -> None:
    run = await suspended_run(gateway, olga, pete)
    with pytest.raises(PermissionDenied, match="other than its requester"):
        gateway.release(run, Principal(name=spelling, role=Role.OPERATOR))
    assert gateway.get_run(run).status is RunStatus.SUSPENDED
    assert (await gateway.submit(run, "psu", "VOLT 1,(@1)")).status == "refused"
    assert gateway.release(run, pete).status is RunStatus.ACTIVE  # another person looked


async def test_nor_around_it_by_a_takeover(gateway: Gateway, olga: Principal,
                                           pete: Principal) -> None:
    """Taking over her own suspended run would make it her own takeover, hers to end; one
    another operator took over is that operator's to end."""
    run = await suspended_run(gateway, olga, pete)
    with pytest.raises(PermissionDenied, match="cannot take it over"):
        gateway.take_over(run, olga, "I will look myself")
    assert gateway.get_run(run).status is RunStatus.SUSPENDED
    gateway.take_over(run, pete, "looking")
    with pytest.raises(PermissionDenied, match="taken over by pete"):
        gateway.release(run, olga)
    with pytest.raises(PermissionDenied, match="taken over by pete"):
        gateway.take_over(run, olga, "mine now")
    assert gateway.get_run(run).takeover_by == "pete"
    assert gateway.release(run, pete).status is RunStatus.ACTIVE


async def test_a_suspension_during_her_own_takeover_is_still_a_suspension(
        gateway: Gateway, olga: Principal, pete: Principal) -> None:
    run = gateway.create_run(olga, "script")
    gateway.take_over(run.id, olga, "driving it by hand")
    for i in range(gateway.config.policy.denials_in_a_row):
        req = (await gateway.submit(run.id, "psu", f"VOLT {i + 1},(@1)")).request
        assert req is not None
        await gateway.deny(req.id, pete, f"no {i}", proposal_hash=req.proposal_hash)
    assert gateway.get_run(run.id).status is RunStatus.SUSPENDED
    with pytest.raises(PermissionDenied, match="other than its requester"):
        gateway.release(run.id, olga)


async def test_her_own_takeover_is_hers_to_end(gateway: Gateway, olga: Principal,
                                               script: Principal) -> None:
    run = gateway.create_run(olga, "script")
    gateway.take_over(run.id, olga, "checking the wiring")
    gateway.take_over(run.id, Principal(name="Olga", role=Role.OPERATOR), "still checking")
    assert gateway.release(run.id, olga).status is RunStatus.ACTIVE
    other = gateway.create_run(script, "script")  # not hers: any operator, as before
    gateway.take_over(other.id, olga, "looking")
    assert gateway.release(other.id, olga).status is RunStatus.ACTIVE


async def test_an_emergency_stop_during_her_own_takeover_is_still_a_suspension(
        gateway: Gateway, olga: Principal, pete: Principal) -> None:
    """The stop suspends the runs whose writes it cancelled, so that another person looks
    at them: a run its own requester had taken over was left taken over, theirs to end."""
    run = gateway.create_run(olga, "script")
    gateway.take_over(run.id, olga, "driving it by hand")
    held = (await gateway.submit(run.id, "psu", "VOLT 1.5,(@1)")).request
    assert held is not None and held.status.value == "pending"
    await gateway.emergency_stop(pete, "test", "psu")
    assert gateway.get_request(held.id).status.value == "cancelled"
    assert gateway.get_run(run.id).status is RunStatus.SUSPENDED
    gateway.clear_stop(pete, "psu")
    with pytest.raises(PermissionDenied, match="other than its requester"):
        gateway.release(run.id, Principal(name="Olga", role=Role.OPERATOR))
    assert gateway.release(run.id, pete).status is RunStatus.ACTIVE  # another person looked
