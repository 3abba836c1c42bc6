"""The fifth hostile review, hole 3: a DL3021 mode no level bounds, set where no write the
gateway judged set it. Short-circuit mode (all the DUT gives) and the list mode (levels no
parameter names) are refused through the gateway (review 4), but set at the front panel
(or brought back by ``*RCL``) nothing read them: ``:INP ON``, with every approval, drew
40 A from a 12 V DUT under a 10 A envelope, and the read-back, which judged the levels,
said "executed". The modes are now fields (``bounded_when``): read in every snapshot,
read-back and watch; the input on in such a mode is outside the envelope.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench_gate.config import BenchConfig, ChannelLimits, InstrumentConfig
from bench_gate.envelope import breaches
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.scpi import get_profile
from sim_instruments import SimDl3021, SimServedThread
from tests.conftest import own_port
from tests.core.test_review_holes_2 import _everything

LIMITS = {1: ChannelLimits(voltage=Decimal(20), current=Decimal(10))}


@pytest.fixture
def load_sim() -> Iterator[SimServedThread]:
    with SimServedThread("dl3021") as served:
        yield served


@pytest.fixture
def config(config: BenchConfig, load_sim: SimServedThread) -> BenchConfig:
    config.instruments.append(InstrumentConfig(name="load", resource=load_sim.resource_name,
                                               profile="dl3021", socket_port=0))
    config.envelope["load"] = dict(LIMITS)
    config.policy.watch_seconds = 0  # the primary defence; the watch has its own test
    return config


def _panel(load_sim: SimServedThread, command: str) -> None:
    """A key pressed at the load's front panel (no interface, no lock)."""
    inst = load_sim.instrument
    assert isinstance(inst, SimDl3021)
    inst.execute(command, False)


def _drawn(load_sim: SimServedThread) -> tuple[float, float]:
    inst = load_sim.instrument
    assert isinstance(inst, SimDl3021)
    return inst.drawn()


@pytest.mark.parametrize(("panel", "named"), [("INP:SHOR ON", "short-circuit mode"),
                                              ("FUNC:MODE LIST", "level mode")])
async def test_the_dl3021_never_draws_in_a_mode_set_at_the_panel(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        load_sim: SimServedThread, panel: str, named: str) -> None:
    """The input off; the panel puts the load in short-circuit (or list) mode. ``:FUNC
    CURR;:CURR 2;:INP ON`` with every approval drew 40 A in short-circuit mode. Refused now
    (-222, the mode named); the input stays off on the load's own port."""
    _panel(load_sim, panel)
    run = gateway.create_run(script, "script", goal="a load test")
    result = await _everything(gateway, run.id, "load", ":FUNC CURR;:CURR 2;:INP ON",
                               olga, pete)
    assert getattr(result, "status", None) == "refused" and result.code == -222, result
    assert named in result.reason, result.reason
    assert _drawn(load_sim) == (12.0, 0.0)
    with own_port(load_sim.resource_name) as res:
        assert res.query(":INP?") in ("0", "OFF")
    _panel(load_sim, panel.replace("ON", "OFF").replace("LIST", "FIX"))
    again = await _everything(gateway, run.id, "load", ":FUNC CURR;:CURR 2;:INP ON",
                              olga, pete)
    assert again.request.status.value == "executed", again.request.outcome
    assert _drawn(load_sim) == (12.0, 2.0)


async def test_a_short_set_at_the_panel_is_found_by_the_next_read_back(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        load_sim: SimServedThread) -> None:
    """Drawing 2 A (CC); the panel enters short-circuit mode (40 A). The next write's
    read-back reads the mode and switches the input off at once."""
    run = gateway.create_run(script, "script", goal="a load test")
    done = await _everything(gateway, run.id, "load", ":FUNC CURR;:CURR 2;:INP ON",
                             olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    _panel(load_sim, "INP:SHOR ON")
    assert _drawn(load_sim) == (12.0, 40.0)
    step = await _everything(gateway, run.id, "load", ":CURR:SLEW 1", olga, pete)
    assert getattr(step, "request", None) is not None, step
    assert _drawn(load_sim) == (12.0, 0.0)


async def test_the_watch_switches_off_a_load_left_in_a_short(
        gateway: Gateway, config: BenchConfig, script: Principal, olga: Principal,
        pete: Principal, load_sim: SimServedThread) -> None:
    config.policy.watch_seconds = 0.2
    run = gateway.create_run(script, "script", goal="a load test")
    done = await _everything(gateway, run.id, "load", ":FUNC CURR;:CURR 2;:INP ON",
                             olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    _panel(load_sim, "INP:SHOR ON")
    for _ in range(40):
        await asyncio.sleep(0.1)
        if _drawn(load_sim)[1] == 0:
            break
    assert _drawn(load_sim) == (12.0, 0.0)


@given(short=st.sampled_from(["0", "1", None, "garbage"]),
       mode=st.sampled_from(["FIX", "fixed", "LIST", "WAV", "BATT", "OCP", "OPP", "", None]),
       on=st.booleans())
def test_a_mode_no_level_bounds_is_outside_only_while_the_input_is_on(
        short: str | None, mode: str | None, on: bool) -> None:
    """For every mode the load can answer (or none), an input that is on is outside the
    envelope exactly when it is in a short, in a mode other than fixed levels, or either
    is unread; an input that is off is never outside for its mode."""
    profile = get_profile("dl3021")
    state = {"ch1.input": "1" if on else "0", "ch1.current": "2", "ch1.voltage": "0",
             "ch1.cv_ilim": "1", "ch1.cr_ilim": "1", "ch1.cp_ilim": "1"}
    if short is not None:
        state["ch1.short"] = short
    if mode is not None:
        state["ch1.func_mode"] = mode
    found = {b.field for b in breaches(profile, LIMITS, state)}
    expected = set()
    if on and short != "0":
        expected.add("short")
    if on and (mode or "").upper() not in ("FIX", "FIXED"):
        expected.add("func_mode")
    assert found == expected, (state, found)


@pytest.mark.parametrize("raw", ["NAN", "OOPS", "", "9.9E37,NAN"])
def test_an_unreadable_level_seen_before_is_never_no_worse(raw: str) -> None:
    """Only a mode (bounded_when) is judged the same by its word: a level that reads as no
    number counts as outside each time, never as 'already there, no worse'."""
    from decimal import Decimal

    from bench_gate.envelope import Breach, no_worse

    level = Breach(1, "voltage", raw, Decimal(6))
    assert not no_worse(level, Breach(1, "voltage", raw, Decimal(6)))
    mode = Breach(1, "short", "1", Decimal(0), mode=True)
    assert no_worse(mode, Breach(1, "short", "1", Decimal(0), mode=True))
    assert not no_worse(mode, Breach(1, "short", None, Decimal(0), mode=True))
