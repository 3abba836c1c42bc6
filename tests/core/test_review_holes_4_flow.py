"""The fourth hostile review, of the flow: approvals, plans, the setpoint cover, the handoff
and the shared store. Each attack is proven on the simulator's own port (never the
gateway's word for it) and closed as a class (docs/reliability.md section 7).

1. another bench's instrument of the same name: on one PostgreSQL store, a run may write
   through two gateways, and two benches may both have a ``psu``. A plan approved for
   bench A's psu ran writes on bench B's psu unattended (B's DUT energized with nobody
   asked); a run's pending writes on A's psu were shown as the state B's would start from;
   and a lease on A's psu was overwritten by one on B's, so A's output outlived its client.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from bench_gate.errors import IdempotencyKeyReused
from bench_gate.gateway import Gateway
from bench_gate.models import Status
from tests import pg
from tests.core.test_multibench import OLGA, PETE, SCRIPT, benches, panel, sims

pg_cluster = pg.pg_cluster
__all__ = ["benches", "pg_cluster", "sims"]  # fixtures, used by name

PLAN = {"instrument": "psu", "channels": [1], "voltage": [0, 5], "current_max": "0.5",
        "output_enable": True, "max_writes": 10}


def _psu(sim: Any, query: str) -> Decimal:
    res = panel(sim)
    try:
        return Decimal(res.query(query))
    finally:
        res.close()


async def _plan(gw: Gateway, run_id: str) -> None:
    """A plan for ``gw``'s psu CH1, both halves approved by two people."""
    asked = await gw.request_plan(run_id, PLAN)
    await gw.grant(asked.id, OLGA, ["setpoint"], proposal_hash=asked.proposal_hash)
    done = await gw.grant(asked.id, PETE, ["output_enable"], proposal_hash=asked.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.message


# ------------------------------------------------------------ 1. another bench's psu
async def test_a_plan_never_runs_writes_on_another_benchs_instrument_of_that_name(
        benches: tuple[str, Gateway, Gateway], sims: Any) -> None:
    """A plan approved on bench A for "psu" CH1 (0 to 5 V, outputs included): the same run's
    ``CURR 0.5``, ``VOLT 5`` and ``OUTP ON`` sent through bench B's gateway to B's psu ran
    at once, inside A's plan, and B's CH1 read 5 V and on. Each is now held for a person on
    B, and A's own writes still run inside the plan."""
    _, a, b = benches
    run = a.create_run(SCRIPT, "script", goal="sweep the DUT on bench A")
    await _plan(a, run.id)
    for message in ("CURR 0.5,(@1)", "VOLT 5,(@1)", "OUTP ON,(@1)"):
        result = await b.submit(run.id, "psu", message)
        assert result.status == "pending", (message, result)
        assert result.request is not None and result.request.plan_id is None
        assert result.request.bench == "bench-b"
    assert _psu(sims[1], "VOLT? (@1)") == 0
    assert _psu(sims[1], "OUTP? (@1)") == 0, "B's DUT was energized under A's plan"
    inside = await a.submit(run.id, "psu", "VOLT 2,(@1)")  # A's plan still works on A
    assert inside.status == "executed", inside
    assert _psu(sims[0], "VOLT? (@1)") == 2


async def test_a_runs_writes_on_one_bench_are_not_the_state_of_another_benchs_instrument(
        benches: tuple[str, Gateway, Gateway], sims: Any) -> None:
    """A run's pending ``VOLT 4,(@2)`` on A's psu was applied to the snapshot of its next
    request on B's psu ("after tk-… executes: ch2.voltage 4.0"): B's request was judged and
    shown on a state B's instrument never had, and could only go stale."""
    _, a, b = benches
    run = a.create_run(SCRIPT, "script", goal="two benches")
    first = await a.submit(run.id, "psu", "VOLT 4,(@2)")
    assert first.status == "pending"
    second = await b.submit(run.id, "psu", "CURR 0.2,(@2)")
    assert second.request is not None
    assert "after_earlier" not in second.request.handoff, second.request.handoff
    assert second.request.snapshot.values["ch2.voltage"] == "0.0"
    done = await a.grant(second.request.id, OLGA, ["setpoint"],
                         proposal_hash=second.request.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.message
    assert _psu(sims[1], "CURR? (@2)") == Decimal("0.2")


async def test_a_lease_on_one_benchs_psu_is_never_overwritten_by_anothers(
        benches: tuple[str, Gateway, Gateway]) -> None:
    """One run energizes CH1 of A's psu, then CH2 of B's: both benches keep their lease (one
    key per run and instrument name let B's replace A's, so A's output would outlive its
    client)."""
    _, a, b = benches
    run = a.create_run(SCRIPT, "script", goal="two benches")
    for gw in (a, b):
        ch = 1 if gw is a else 2
        asked = await gw.submit(run.id, "psu", f"VOLT 1,(@{ch});:CURR 0.1,(@{ch});"
                                               f":OUTP ON,(@{ch})")
        assert asked.request is not None
        await gw.grant(asked.request.id, OLGA, ["setpoint"],
                       proposal_hash=asked.request.proposal_hash)
        done = await gw.grant(asked.request.id, PETE, ["output_enable"],
                              proposal_hash=asked.request.proposal_hash)
        assert done.request.status is Status.EXECUTED, done.message
    assert [(x["instrument"], x["channels"]) for x in a.leases()] == [("psu", [1])]
    assert [(x["instrument"], x["channels"]) for x in b.leases()] == [("psu", [2])]


async def test_an_idempotency_key_never_answers_for_another_benchs_instrument(
        benches: tuple[str, Gateway, Gateway], sims: Any) -> None:
    """The run's ``VOLT 3,(@3)`` with key k1 on A's psu, then the same with k1 through B:
    B answered with A's request (its status, its outcome) and B's psu got nothing. The key
    names another request, so it is refused, and A's is untouched."""
    _, a, b = benches
    run = a.create_run(SCRIPT, "script", goal="two benches")
    first = await a.submit(run.id, "psu", "VOLT 3,(@3)", idempotency_key="k1")
    assert first.status == "pending" and first.request is not None
    with pytest.raises(IdempotencyKeyReused) as refused:
        await b.submit(run.id, "psu", "VOLT 3,(@3)", idempotency_key="k1")
    assert refused.value.differences[0] == "bench", refused.value.differences
    assert _psu(sims[1], "VOLT? (@3)") == 0
    assert a.get_request(first.request.id).status is Status.PENDING
