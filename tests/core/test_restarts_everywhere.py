"""An instrument that restarts at every step: it answers, drops the connection and comes
back in another state. Whatever the gateway judges (the envelope watch's look, a read-back,
a meter's function before a reading, the stop's read-back) stands only for the connection it
was read on: half a state read before a restart and half after is no state. Every check of
the instrument is made on the simulator's own port (``front_panel``), on the loop ``bench-gate
serve`` runs (uvloop), where an answer and the hang-up behind it are read in one go."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop

from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from tests.conftest import Clock
from tests.liar_instrument import LyingInstrument, liar, lied_config, lied_gateway

__all__ = ["liar", "lied_config"]  # the fixtures, for pytest

T = TypeVar("T")


def on_uvloop(cfg: BenchConfig, db_path: Path, clock: Clock, io: str,
              scenario: Callable[[Gateway], Awaitable[T]]) -> T:
    """``scenario`` on a started gateway (its PSU link ``io``), on uvloop."""
    async def run() -> T:
        g = lied_gateway(cfg, db_path, clock, io)
        await g.start()
        try:
            return await scenario(g)
        finally:
            await g.close()
            g.store.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(run())


def panel(front_panel: Any, query: str) -> Decimal:
    return Decimal(str(front_panel.query(query)).strip())


@pytest.mark.parametrize("io", ["auto", "pyvisa"])
def test_the_watch_never_judges_half_a_state_read_before_a_restart(
        lied_config: BenchConfig, db_path: Path, clock: Clock, liar: LyingInstrument,
        front_panel: Any, io: str) -> None:
    """CH2 off at 5 V. The watch reads its output (off) and its voltage (5 V), then the
    instrument answers CH2's current and restarts with CH2 on at 20 V (envelope 12 V). The
    rest was read on the new connection and judged with the old half: off at 5 V, inside,
    nothing done, CH2 left on at 20 V. Now the look starts again on the new connection and
    finds the breach; the safe action switches CH2 off."""
    lied_config.policy.watch_seconds = 0  # no sweeper: the one check below, nothing else
    for text in ("OUTP OFF,(@2)", "VOLT 5,(@2)", "CURR 0.2,(@2)"):
        front_panel.write(text)

    async def scenario(g: Gateway) -> Any:
        inst = g.instrument("psu")
        await g.watch.check(inst)  # a first look: every connection asked who answers
        liar.hang_up("CURR? (@2)", sends="VOLT 20,(@2);OUTP ON,(@2)")
        safed = await g.watch.check(inst)
        assert ("hang_up", "CURR? (@2)") in liar.fired  # the restart came where it was meant
        return safed

    safed = on_uvloop(lied_config, db_path, clock, io, scenario)
    assert panel(front_panel, "VOLT? (@2)") == 20  # the state it restarted into
    assert panel(front_panel, "OUTP? (@2)") == 0, safed  # never left on outside
    assert safed is not None and safed.sent[-1] == "OUTP 0,(@2)", safed
    assert (2, "voltage", "20.0") in {(b.channel, b.field, b.value) for b in safed.found}


@pytest.mark.parametrize("io", ["auto", "pyvisa"])
def test_a_stop_is_not_reported_safe_from_half_a_read_back(
        lied_config: BenchConfig, db_path: Path, clock: Clock, liar: LyingInstrument,
        olga: Principal, front_panel: Any, io: str) -> None:
    """The stop switches every channel off and reads them back. CH1 reads off; as it
    answers CH2, the instrument restarts with CH1 on (a power-on state that keeps outputs
    on). CH3 was read on the new connection, and the stop said every channel was off. Now
    the read-back is one state: the connection lost midway, the safe action goes once more
    and is read back again, and CH1 is off."""
    lied_config.policy.watch_seconds = 0  # nothing but the stop switches an output off
    front_panel.write("VOLT 1,(@1)")

    async def scenario(g: Gateway) -> Any:
        await g.watch.check(g.instrument("psu"))  # a first look: who answers, asked
        liar.hang_up("OUTP? (@2)", sends="OUTP ON,(@1)", after="OUTP? (@1)")
        done = await g.emergency_stop(olga, "test", "psu")
        assert ("hang_up", "OUTP? (@2)") in liar.fired  # the restart came where it was meant
        return done["instruments"]["psu"]

    done = on_uvloop(lied_config, db_path, clock, io, scenario)
    assert int(panel(front_panel, "OUTP? (@1)")) == 0, done  # made safe after all
    assert done["read_back"] == {"ch1.output": "0", "ch2.output": "0", "ch3.output": "0"}
    assert done["sent"].count("OUTP 0,(@1)") == 2, done  # once more after the restart
