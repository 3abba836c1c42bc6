"""Hostile review 8, the SCPI side, on the simulated E36312A's own port.

Hole 3: an output enable judged on a state an earlier unit of its message replaced. With
20 V stored in slot 1 for CH2 at the panel (envelope 12 V) and CH2 off at 3 V, ``*RCL 1``
and then ``:OUTP ON,(@2)``, each alone, are safe: the recall runs (every approval), and the
output enable is refused (-222: the snapshot reads 20 V). Sent as one message, ``*RCL 1;
:OUTP ON,(@2)`` was judged on the snapshot from before the recall (3 V): with every approval
CH2 put 20 V on the DUT until the read-back switched it off. A unit that may set every
channel's levels and outputs to values no snapshot read (``*RCL``, ``*RST``, a stored state
loaded, a coupling; a header the profile does not know) is never followed by an output
enable in the same message (-221): the energize goes in a message of its own, judged on
what the instrument reads after it.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench_gate.config import ChannelLimits, PolicyConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.policy import Verdict, decide
from bench_gate.scpi import (
    Effect,
    ScpiError,
    available_profiles,
    classify,
    command_examples,
    get_profile,
)
from sim_instruments import SimBenchThread
from tests.conftest import own_port
from tests.core.test_review_holes_2 import _everything


def _watch_ch2(sim: SimBenchThread) -> list[tuple[int, float]]:
    """(output, voltage) of CH2 after every unit the supply takes, from any interface."""
    psu = sim.psu
    seen: list[tuple[int, float]] = []
    perform = psu.perform

    def watched(canonical: str, query: bool) -> str | None:
        answer = perform(canonical, query)
        seen.append((int(perform("OUTP? (@2)", True) or 0),
                     float(perform("VOLT? (@2)", True) or 0)))
        return answer

    psu.perform = watched  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize("recall", ["*RCL 1", "*rcl 1", "*RST", "*RCL 1;:CURR 0.2,(@2)"])
async def test_an_output_enable_is_never_judged_on_a_state_a_recall_replaced(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: SimBenchThread, front_panel: Any, recall: str) -> None:
    front_panel.write("VOLT 20,(@2);:CURR 0.2,(@2);*SAV 1;:VOLT 3,(@2)")
    assert front_panel.query("*OPC?") == "1"
    seen = _watch_ch2(sim)
    run = gateway.create_run(script, "script", goal="power the DUT")
    done = await _everything(gateway, run.id, "psu", f"{recall};:OUTP ON,(@2)", olga, pete)
    assert getattr(done, "status", None) == "refused" and done.code == -221, done
    assert "message of its own" in done.reason
    assert all(out == 0 for out, _ in seen), seen
    with own_port(sim.psu_resource_name) as port:
        assert port.query("OUTP? (@2)") == "0"
        assert Decimal(port.query("VOLT? (@2)")) == 3


async def test_the_recall_and_the_enable_one_after_the_other_are_each_judged(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        sim: SimBenchThread, front_panel: Any) -> None:
    """The way that works: the recall alone, then the output enable, judged on the 20 V
    the instrument now reads (-222). Slot 1 is saved through the gateway (20 V with CH2
    off is no breach), so the recall is predicted and judged."""
    front_panel.write("VOLT 20,(@2);:CURR 0.2,(@2)")
    run = gateway.create_run(script, "script", goal="power the DUT")
    saved = await _everything(gateway, run.id, "psu", "*SAV 1", olga, pete)
    assert saved.request.status.value == "executed", saved.request.outcome
    front_panel.write("VOLT 3,(@2)")
    assert front_panel.query("*OPC?") == "1"
    recalled = await _everything(gateway, run.id, "psu", "*RCL 1", olga, pete)
    assert recalled.request.status.value == "executed", recalled.request.outcome
    on = await _everything(gateway, run.id, "psu", ":OUTP ON,(@2)", olga, pete)
    assert on.status == "refused" and on.code == -222 and "20.0" in on.reason, on
    with own_port(sim.psu_resource_name) as port:
        assert port.query("OUTP? (@2)") == "0"


def _everything_before_an_enable() -> list[tuple[str, str, str]]:
    """(profile, a unit that may set every channel, an output enable of that profile)."""
    out: list[tuple[str, str, str]] = []
    for name in available_profiles():
        profile = get_profile(name)
        examples = command_examples(profile, frozenset(Effect) - {Effect.FORBIDDEN})
        enables: list[str] = []
        for e in examples:  # an output's example switches it off: switch it on instead
            if e.effect is not Effect.OUTPUT or " " not in e.message:
                continue
            head, rest = e.message.split(" ", 1)
            on = f"{head} " + re.sub(r"(?<![\w.])(0|OFF)(?![\w.])", "ON", rest, count=1)
            if any(x.effect is Effect.OUTPUT and x.value is True
                   for x in classify(on, name).units):
                enables.append(on)
        blind = [e.message for e in examples
                 if all(x.writes and (x.effect in (Effect.STATE, Effect.UNKNOWN))
                        and (f := profile.form_of(x.canonical)) is not None
                        and f.channel == "all" for x in classify(e.message, name).units)]
        out.extend((name, b, e) for b in blind for e in enables)
    return out


_CASES = _everything_before_an_enable()


@settings(max_examples=200, deadline=None)
@given(case=st.sampled_from(_CASES))
def test_no_output_enable_follows_a_unit_that_may_set_every_channel(
        case: tuple[str, str, str]) -> None:
    """For every profile, every command that may set every channel, and every output
    enable: the two in one message are refused, never held, under any envelope."""
    name, blind, enable = case
    profile = get_profile(name)
    limits = {ch: ChannelLimits(voltage=Decimal(1000), current=Decimal(1000))
              for ch in profile.channels}
    try:
        c = classify(f"{blind};:{enable}", name)
    except ScpiError:
        return  # refused as a message: never runs
    decision = decide(c, limits, PolicyConfig())
    assert decision.verdict is Verdict.REFUSE and decision.code == -221, (blind, enable)


def test_an_unknown_header_before_an_enable_is_refused_too() -> None:
    c = classify("SYST:PRES;:OUTP ON", "generic")
    assert c.units[0].effect is Effect.UNKNOWN
    c = classify("MEM:LOAD 1;:OUTP CH2,ON", "dp832")
    assert decide(c, {}, PolicyConfig()).code == -221
    assert len(_CASES) > 20
