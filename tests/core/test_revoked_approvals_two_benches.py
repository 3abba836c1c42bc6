"""Two gateways on one PostgreSQL store: people decide on bench B's request through A's
gateway, and a token is revoked through A (B is not told). B, which owns the instrument,
refuses what stood on the revoked token, seen on B's simulator's own port."""

from __future__ import annotations

from decimal import Decimal

from bench_gate.auth import Tokens
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from sim_instruments import SimBenchThread
from tests import pg
from tests.core.test_multibench import SCRIPT, benches, panel, sims

pg_cluster = pg.pg_cluster
__all__ = ["benches", "pg_cluster", "sims"]  # fixtures, used by name


def operator(tokens: Tokens, name: str) -> Principal:
    who = tokens.verify(tokens.create(name, "operator")[1])
    assert who is not None
    return who


async def test_a_cover_revoked_on_a_never_energizes_bs_channel(
        benches: tuple[str, Gateway, Gateway],
        sims: tuple[SimBenchThread, SimBenchThread]) -> None:
    """B's CH1 current limit in force was approved by olga; the request (3 V and switch on)
    stands on it. oscar approves its setpoint through A, olga's token is revoked through A,
    ida approves the output enable through A: B refuses it, CH1 stays off."""
    _, a, b = benches
    tokens = Tokens(a.store)
    olga, oscar, ida = (operator(tokens, n) for n in ("olga", "oscar", "ida"))
    run = b.create_run(SCRIPT, "script")
    set_ = (await b.submit(run.id, "psu", "VOLT 2,(@1);:CURR 0.1,(@1)")).request
    assert set_ is not None
    done = await a.grant(set_.id, olga, ["setpoint"], proposal_hash=set_.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.request.outcome
    on = (await b.submit(run.id, "psu", "VOLT 3,(@1);:OUTP ON,(@1)")).request
    assert on is not None and on.handoff.get("setpoint_cover")
    await a.grant(on.id, oscar, ["setpoint"], proposal_hash=on.proposal_hash)
    assert tokens.revoke("olga") == 1
    final = (await a.grant(on.id, ida, ["output_enable"],
                           proposal_hash=on.proposal_hash)).request
    assert final.status is not Status.EXECUTED, final.outcome
    res = panel(sims[1])
    try:
        assert int(res.query("OUTP? (@1)")) == 0
        assert Decimal(res.query("VOLT? (@1)")) == 2
    finally:
        res.close()
    assert b.get_request(on.id).status is not Status.EXECUTED
