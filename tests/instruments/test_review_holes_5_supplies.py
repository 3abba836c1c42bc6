"""The fifth hostile review, hole 2: a triggered level on supplies whose trigger waits.

The DP832's ``:SOURce<n>:VOLTage:TRIGgered`` was a header its incomplete profile did not
know (held, every approval, its level never judged), and ``:TRIGger`` applied it after the
trigger delay (1 s at least), long after the read-back. On the E3631A a ``VOLT:TRIG`` level
stored at the panel, then ``INIT`` and ``*TRG`` with a ``TRIG:DEL``, did the same. Each
instrument's triggered levels are now fields bounded by the envelope (``points``): judged
before they are stored, read in every snapshot, read-back and watch, and no trigger is sent
while one is stored outside on an energized channel. Proved on each simulator's own port.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal

import pytest

from bench_gate.config import BenchConfig, ChannelLimits
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import own_port, served_bench
from tests.core.test_review_holes_2 import _everything

LIMITS = {1: ChannelLimits(voltage=Decimal(6), current=Decimal(1)),
          2: ChannelLimits(voltage=Decimal(12), current=Decimal("0.5")),
          3: ChannelLimits(voltage=Decimal(12), current=Decimal("0.5"))}


@pytest.fixture
def dp832_sim() -> Iterator[SimServedThread]:
    with SimServedThread("dp832") as served:
        yield served


@pytest.fixture
def e3631a_sim() -> Iterator[SimServedThread]:
    with SimServedThread("e3631a") as served:
        yield served


@pytest.fixture
def config(sim: SimBenchThread, dp832_sim: SimServedThread,
           e3631a_sim: SimServedThread) -> BenchConfig:
    cfg = served_bench(sim, "dp832", dp832_sim, "dp832", LIMITS)
    extra = served_bench(sim, "e3631a", e3631a_sim, "e3631a", LIMITS)
    cfg.instruments.append(extra.instruments[-1])
    cfg.envelope["e3631a"] = extra.envelope["e3631a"]
    cfg.policy.watch_seconds = 0  # the primary defence, not the watch's bound
    return cfg


def _dp832(served: SimServedThread, channel: int) -> tuple[Decimal, str]:
    """What a DP832 output's DUT sees on the simulator's own port: volts, output."""
    with own_port(served.resource_name) as res:
        return (Decimal(res.query(f"MEAS:VOLT? CH{channel}")),
                res.query(f"OUTP? CH{channel}"))


def _e3631a_p25v(served: SimServedThread) -> tuple[Decimal, str]:
    with own_port(served.resource_name) as res:
        res.write("INST:NSEL 2")
        return Decimal(res.query("MEAS:VOLT?")), res.query("OUTP?")


def test_the_simulated_dp832_applies_its_triggered_levels_after_the_delay(
        dp832_sim: SimServedThread) -> None:
    with own_port(dp832_sim.resource_name, panel=True) as res:
        res.write(":SOUR2:CURR 0.5;:SOUR2:VOLT 3;:OUTP CH2,ON;:SOUR2:VOLT:TRIG 7;:TRIG")
        assert res.query("*OPC?") == "1"
        assert Decimal(res.query("MEAS:VOLT? CH2")) == 3  # the delay: 1 s
    import time
    time.sleep(1.3)
    assert _dp832(dp832_sim, 2) == (Decimal(7), "ON")


def test_the_simulated_e3631a_applies_its_triggered_levels_on_a_trigger(
        e3631a_sim: SimServedThread) -> None:
    with own_port(e3631a_sim.resource_name, panel=True) as res:
        res.write("INST:NSEL 2;:CURR 0.5;:VOLT 3;:OUTP ON;:VOLT:TRIG 7;:TRIG:DEL 0.3")
        assert Decimal(res.query("VOLT:TRIG?")) == 7
        res.write("INST:NSEL 1")
        assert Decimal(res.query("VOLT:TRIG?")) == 0  # unset: the immediate level
        res.write("INST:NSEL 2;:INIT;*TRG")
        assert res.query("*OPC?") == "1"
        assert Decimal(res.query("MEAS:VOLT?")) == 3
    import time
    time.sleep(0.6)
    assert _e3631a_p25v(e3631a_sim) == (Decimal(7), "1")


async def test_a_dp832_triggered_level_never_leaves_the_envelope(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        dp832_sim: SimServedThread) -> None:
    """CH1 on at 3 V under a 6 V envelope. ``:SOUR1:VOLT:TRIG 20`` is judged before it is
    stored (-222). Stored at the panel, ``:TRIG`` (every approval) would apply it a second
    after the read-back: refused (-222), and CH1 stays at 3 V on the supply's own port."""
    run = gateway.create_run(script, "script", goal="a triggered step")
    done = await _everything(gateway, run.id, "dp832",
                             ":SOUR1:CURR 0.5;:SOUR1:VOLT 3;:OUTP CH1,ON", olga, pete)
    assert done.request.status.value == "executed", done.request.outcome
    stored = await _everything(gateway, run.id, "dp832", ":SOUR1:VOLT:TRIG 20", olga, pete)
    assert stored.status == "refused" and stored.code == -222, stored
    with own_port(dp832_sim.resource_name, panel=True) as panel:
        assert Decimal(panel.query("SOUR1:VOLT:TRIG?")) == 0, "20 V was never stored"
        panel.write(":SOUR1:VOLT:TRIG 20")
        assert panel.query("*OPC?") == "1"
    for message in (":TRIG", "*TRG"):
        fired = await _everything(gateway, run.id, "dp832", message, olga, pete)
        assert fired.status == "refused" and fired.code == -222, (message, fired)
        assert "CH1 triggered voltage" in fired.reason, fired.reason
    await asyncio.sleep(1.3)
    assert _dp832(dp832_sim, 1) == (Decimal(3), "ON")


async def test_an_e3631a_triggered_level_set_at_the_panel_never_runs(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        e3631a_sim: SimServedThread) -> None:
    """The P25V output on at 3 V under a 12 V envelope; the panel stores ``VOLT:TRIG 20``
    for it with a 0.3 s trigger delay. ``INIT`` and ``*TRG`` (every approval) read back 3 V,
    and 0.3 s later the DUT had 20 V. Both are refused now (-222, the stored level named)."""
    run = gateway.create_run(script, "script", goal="a triggered step")
    done = await _everything(gateway, run.id, "e3631a",
                             "APPL P6V,1,0.5;:APPL P25V,3,0.1;:APPL N25V,0,0.1;:OUTP ON",
                             olga, pete)
    assert done.request is not None, done
    assert done.request.status.value == "executed", done.request.outcome
    with own_port(e3631a_sim.resource_name, panel=True) as panel:
        panel.write("INST:NSEL 2;:VOLT:TRIG 20;:TRIG:DEL 0.3")
        assert panel.query("*OPC?") == "1"
    for message in ("INIT", "*TRG"):
        fired = await _everything(gateway, run.id, "e3631a", message, olga, pete)
        assert fired.status == "refused" and fired.code == -222, (message, fired)
        assert "CH2 triggered voltage" in fired.reason, fired.reason
    await asyncio.sleep(0.6)
    assert _e3631a_p25v(e3631a_sim) == (Decimal(3), "1")
