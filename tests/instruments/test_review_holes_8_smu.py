"""Hostile review 8, the SCPI side, on the simulated 2450's own port.

Hole 2: a read-back that lies by the instrument's own answer format. ``:FORMat:ASCii:
PRECision`` (2450 Reference Manual, section 6: "the precision (number of digits) for all
numbers returned in the ASCII format") was harmless, so it passed unattended; at
``:FORM:ASC:PREC 1`` a source level of 10.4 V answers ``+1E+01``. With 10.4 V set at the
panel under a 10 V envelope (or an envelope since tightened), ``:OUTP ON`` was judged on
10 V: with its approvals it put 10.4 V on the DUT, and the read-back, reading 10 V, said
"executed". The gateway judges the 2450 by its answers, so only the automatic precision
(0) is taken (-222 otherwise).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.scpi import ScpiError, classify
from sim_instruments import SimServedThread, SimSmu
from tests.conftest import own_port
from tests.instruments.test_k2450 import config, smu_sim

__all__ = ["config", "smu_sim"]  # the 2450's bench: its fixtures


async def _everything(gw: Gateway, run_id: str, message: str, who: Principal) -> str:
    result = await gw.submit(run_id, "smu", message)
    if result.request is None or result.status != "pending":
        return f"{result.status} {result.code} {result.reason}"
    req = result.request
    done = await gw.grant(req.id, who, [k.value for k in req.missing()],
                          proposal_hash=req.proposal_hash)
    return f"{done.request.status.value} {done.request.outcome}"


@pytest.mark.parametrize("digits", ["1", "2", "#H1", "0.6"])
async def test_an_answer_format_never_hides_a_level_outside_the_envelope(
        gateway: Gateway, script: Principal, olga: Principal, smu_sim: SimServedThread,
        digits: str) -> None:
    inst = smu_sim.instrument
    assert isinstance(inst, SimSmu)
    inst.execute("SOUR1:CURR:VLIM 5.0", False)  # at the panel, the output off
    inst.execute("SOUR1:VOLT:ILIM 0.05", False)
    inst.execute("SOUR1:VOLT 10.4", False)
    run = gateway.create_run(script, "script", goal="bias the DUT")
    fmt = await gateway.submit(run.id, "smu", f":FORM:ASC:PREC {digits}")
    assert fmt.status == "refused" and fmt.code == -222, fmt
    outcome = await _everything(gateway, run.id, ":OUTP ON", olga)
    assert outcome.startswith("refused -222") and "10.4" in outcome, outcome
    with own_port(smu_sim.resource_name, panel=True) as panel:
        assert panel.query("FORM:ASC:PREC?") == "0"
        assert panel.query("OUTP?") == "0"
    assert inst.terminals() == (0.0, 0.0)


def test_the_simulated_2450_answers_with_its_precision() -> None:
    with SimServedThread("smu") as served:
        inst = served.instrument
        inst.execute("SOUR1:VOLT 10.4", False)
        inst.execute("FORM:ASC:PREC 1", False)
        assert inst.execute("SOUR1:VOLT?", True) == "+1E+01"
        assert inst.execute("OUTP1?", True) == "0"


@settings(max_examples=50, deadline=None)
@given(digits=st.integers(min_value=-3, max_value=20))
def test_only_the_automatic_precision_is_taken(digits: int) -> None:
    """Every precision but automatic (0, DEFault) is refused with -222, never held or passed."""
    try:
        (unit,) = classify(f":FORM:ASC:PREC {digits}", "k2450").units
    except ScpiError as exc:
        assert exc.code == -222 and digits != 0
        return
    assert digits == 0 and unit.canonical == "FORM:ASC:PREC 0"
