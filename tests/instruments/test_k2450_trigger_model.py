"""The 2450's trigger model runs after the read-back (Reference Manual, section 6,
TRIGger:LOAD and the trigger model's blocks): once ``INIT`` (or ``*TRG``) starts it, its
blocks source a sweep's points, recall a source configuration list point by point
(``TRIG:LOAD "ConfigList",...``: lists stored at the panel, whose levels no parameter
names and whose creation through the gateway is forbidden), or switch the output on, each
after its delay. ``TRIG:LOAD "ConfigList","panelList"`` and ``INIT`` each ran with every
approval, read back whatever the first instant showed and said "executed"; the model
loaded at the panel was never judged at all. Starting the trigger model is forbidden
(-203), as the DL3021's trigger is. The simulated 2450 does not model the trigger model:
the refusal, and nothing on the simulator's own port, is the proof.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.policy import Verdict, decide
from bench_gate.scpi import classify
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import own_port, served_bench
from tests.core.test_review_holes_2 import _everything

from .test_k2450 import LIMITS, PROFILE

STARTS = ["INIT", ":INIT:IMM", "init:immediate", ":INITiate", "*TRG", "*trg",
          ':TRIG:LOAD "ConfigList",panelList;:INIT']


@pytest.fixture
def smu_sim() -> Iterator[SimServedThread]:
    with SimServedThread("smu") as served:
        yield served


@pytest.fixture
def config(sim: SimBenchThread, smu_sim: SimServedThread) -> BenchConfig:
    return served_bench(sim, "smu", smu_sim, PROFILE, {1: LIMITS})


@pytest.mark.parametrize("message", STARTS)
def test_the_trigger_model_is_never_started_through_the_gateway(
        message: str, config: BenchConfig) -> None:
    decision = decide(classify(message, PROFILE), {1: LIMITS}, config.policy)
    assert decision.verdict is Verdict.REFUSE and decision.code == -203, decision


@pytest.mark.parametrize("message", ["INIT", "*TRG"])
async def test_a_start_with_every_approval_never_reaches_the_smu(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        smu_sim: SimServedThread, message: str) -> None:
    seen: list[str] = []
    smu = smu_sim.instrument
    perform = smu.perform

    def watched(canonical: str, query: bool) -> Any:
        seen.append(canonical)
        return perform(canonical, query)

    smu.perform = watched  # type: ignore[method-assign]
    run = gateway.create_run(script, "script", goal="run the sweep")
    done = await _everything(gateway, run.id, "smu", message, olga, pete)
    assert getattr(done, "status", None) == "refused" and done.code == -203, done
    assert not [c for c in seen if c.startswith(("INIT", "*TRG"))], seen
    with own_port(smu_sim.resource_name) as port:
        assert port.query(":OUTP?") == "0"
