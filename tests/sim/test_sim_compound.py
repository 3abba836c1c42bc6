"""The simulated E36312A answers a compound query as the instrument does (IEEE 488.2
§7.4.1, §8.4.1): one response message, one answer per query unit in order, joined by ';',
the same answers as the queries asked one by one; ``*IDN?`` last."""

from __future__ import annotations

from typing import Any

from bench_gate.scpi import get_profile
from bench_gate.scpi.compound import read_plan
from sim_instruments import SimBenchThread
from tests.conftest import own_port


def test_the_supply_answers_a_compound_query_as_its_queries_one_by_one(
        sim: SimBenchThread, front_panel: Any) -> None:
    for command in ("VOLT 3.3,(@2)", "CURR 0.2,(@2)", "OUTP 1,(@2)", "OUTP:TRAC 1"):
        front_panel.write(command)
    profile = get_profile("e36312a")
    fields = [(ch, f) for ch in (1, 2, 3) for f, spec in profile.fields.items()
              if not spec.measured and profile.has_field(f, ch)]
    plan = read_plan(profile, fields)
    assert plan.message is not None
    with own_port(sim.psu_resource_name) as port:
        joined = port.query(plan.message).strip()
        alone = [port.query(profile.field_query(f, ch)).strip() for ch, f in plan.joined]
        idn = port.query("*IDN?").strip()
        assert port.query("SYST:ERR?").strip().startswith("+0"), "no error from the message"
    answers, got_idn = plan.split(joined)
    assert answers == alone and got_idn == idn
    assert float(answers[plan.joined.index((2, "voltage"))]) == 3.3
