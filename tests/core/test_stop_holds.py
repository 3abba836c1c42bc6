"""An emergency stop that holds (bench_gate/holding.py): while a stop is in force, an output
switched on at the front panel, or one whose safe action failed when the stop was pressed,
is switched off again within the watch period, journaled; after a clear the normal rules
apply. Every output is read on the simulator's own port (``front_panel``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.instruments import PyvisaLink
from bench_gate.models import EventType, Principal
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import Clock, served_bench
from tests.faults import Fault, FaultLink
from tests.waits import until


def on(front_panel: Any, ch: int) -> bool:
    return int(front_panel.query(f"OUTP? (@{ch})")) == 1


def enforced(gw: Gateway) -> list[dict[str, Any]]:
    return [e.data for e in gw.journal(f"bench:{gw.bench}", limit=1000)
            if e.type is EventType.STOP_ENFORCED]


def switch_on_at_panel(front_panel: Any, ch: int = 1) -> None:
    front_panel.write(f"VOLT 1,(@{ch})")  # inside the envelope: the watch alone leaves it
    front_panel.write(f"OUTP 1,(@{ch})")
    assert on(front_panel, ch)


@pytest.mark.parametrize("instrument", [None, "psu"])
async def test_an_output_switched_on_at_the_panel_under_a_stop_goes_off_again(
        gateway: Gateway, olga: Principal, front_panel: Any, instrument: str | None) -> None:
    """A colleague switches CH1 on at the panel, at 1 V (inside the envelope), while the
    bench (or the supply) is stopped: the gateway switches it off again within the watch
    period, every time, journaled and alerted; once cleared, the panel's CH1 stays on."""
    await gateway.emergency_stop(olga, "test", instrument)
    async with gateway.subscribe() as queue:
        for _ in range(2):  # as long as the stop holds, not only once
            switch_on_at_panel(front_panel)
            assert await until(lambda: not on(front_panel, 1)), "CH1 left on under a stop"
        assert await until(lambda: len(enforced(gateway)) >= 2)
        alerts = []
        while not queue.empty():
            alerts.append(queue.get_nowait())
    found = enforced(gateway)
    assert found[0]["instrument"] == "psu" and "CH1" in found[0]["found"]
    assert found[0]["safe_action"][-1] == "OUTP 0,(@1)" and found[0]["error"] is None
    assert found[0]["read_back"]["ch1.output"] == "0"
    assert any(a.get("alert") == "stop_enforced" and "psu is stopped" in a.get("reason", "")
               for a in alerts), alerts
    gateway.clear_stop(olga)
    switch_on_at_panel(front_panel)
    start = gateway.watch.checks
    assert await until(lambda: gateway.watch.checks >= start + 3)
    assert on(front_panel, 1), "after the clear, the normal rules (inside: left alone)"


async def test_a_stop_holds_with_the_envelope_watch_off(
        config: BenchConfig, db_path: Path, olga: Principal, front_panel: Any) -> None:
    """``watch_seconds = 0`` switches the envelope watch off, never a stop."""
    config.policy.watch_seconds = 0
    gw = Gateway(config, SqliteStore(db_path))
    await gw.start()
    try:
        await gw.emergency_stop(olga, "test", "psu")
        switch_on_at_panel(front_panel, 2)
        assert await until(lambda: not on(front_panel, 2))
    finally:
        await gw.close()
        gw.store.close()


async def test_a_stop_holds_across_a_restart(config: BenchConfig, db_path: Path,
                                             clock: Clock, olga: Principal,
                                             front_panel: Any) -> None:
    """Stop, close, start again: the stop is in force and still enforced on the panel."""
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    await gw.emergency_stop(olga, "test", "psu")
    await gw.close()
    gw.store.close()
    switch_on_at_panel(front_panel, 3)  # while the gateway is down
    gw = Gateway(config, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        assert set(gw.stopped()) == {"psu"}
        assert await until(lambda: not on(front_panel, 3))
        switch_on_at_panel(front_panel, 1)
        assert await until(lambda: not on(front_panel, 1))
    finally:
        await gw.close()
        gw.store.close()


@pytest.fixture
async def faulty(config: BenchConfig, db_path: Path) -> AsyncIterator[tuple[Gateway, FaultLink]]:
    psu = config.instrument("psu")
    assert psu is not None
    psu.timeout_ms = 1000
    link = FaultLink(PyvisaLink(psu), "psu")
    gw = Gateway(config, SqliteStore(db_path), links={"psu": link})
    await gw.start()
    yield gw, link
    await gw.close()
    gw.store.close()


async def test_a_stop_whose_safe_action_failed_is_tried_until_the_output_reads_off(
        faulty: tuple[Gateway, FaultLink], olga: Principal, front_panel: Any) -> None:
    """CH1 on inside the envelope; the stop's ``OUTP 0,(@1)`` times out (and so do the next
    tries): the stop says so and CH1 is still on. It is never taken as done: tried again
    each period, its failure journaled once, until a try works and reads CH1 off, which
    is journaled as proven."""
    gw, link = faulty
    switch_on_at_panel(front_panel, 1)
    link.arm(Fault.WRITE_TIMEOUT, match="OUTP 0,(@1)", times=4)
    done = await gw.emergency_stop(olga, "test", "psu")
    assert done["instruments"]["psu"]["errors"], done
    assert "tried again" in done["instruments"]["psu"]["retry"]
    assert on(front_panel, 1)
    assert await until(lambda: not on(front_panel, 1)), "a failed stop was never retried"
    assert sum(1 for f, c in link.fired if c == "OUTP 0,(@1)") == 4
    assert await until(lambda: any("proven" in e for e in enforced(gw)))
    found = enforced(gw)
    failures = [e for e in found if e["error"]]
    assert len(failures) == 1, found  # once, not every period
    assert found[-1]["error"] is None and found[-1]["read_back"]["ch1.output"] == "0"
    assert "OUTP 0,(@1)" in found[-1]["safe_action"]


async def test_a_stop_never_shown_off_says_so_until_it_is_and_when_it_is_cleared(
        faulty: tuple[Gateway, FaultLink], olga: Principal, front_panel: Any) -> None:
    """The supply will not take ``OUTP 0,(@1)`` at all: the stop, as listed, says CH1 is
    not shown off; cleared so, the clear's journal event and alert say it too."""
    gw, link = faulty
    switch_on_at_panel(front_panel, 1)
    link.arm(Fault.WRITE_TIMEOUT, match="OUTP 0,(@1)", times=1000)
    await gw.emergency_stop(olga, "test", "psu")
    assert "still reads on" in gw.stopped()["psu"]["not_shown_off"]
    start = gw.watch.checks
    assert await until(lambda: gw.watch.checks >= start + 2)
    assert on(front_panel, 1) and "not_shown_off" in gw.stopped()["psu"]
    async with gw.subscribe() as queue:
        gw.clear_stop(olga)
        alerts = []
        while not queue.empty():
            alerts.append(queue.get_nowait())
    cleared = [e.data for e in gw.journal(f"bench:{gw.bench}", limit=1000)
               if e.type is EventType.STOP_CLEARED]
    assert "CH1" in cleared[-1]["not_shown_off"]["psu"], cleared
    assert any("not every output was shown off" in a.get("reason", "") for a in alerts)


async def test_a_stop_cleared_before_its_safe_action_is_done_says_so(
        faulty: tuple[Gateway, FaultLink], olga: Principal, front_panel: Any) -> None:
    """The stop's ``OUTP 0,(@1)`` hangs (then times out), and an operator clears the stop
    meanwhile. The clear said nothing of an output not shown off (no read-back had come
    yet), the stop then said its safe action would be tried again every watch period (it
    never was: cleared), and CH1 stayed on with nobody told to check the bench."""
    gw, link = faulty
    switch_on_at_panel(front_panel, 1)
    link.arm(Fault.WRITE_TIMEOUT, match="OUTP 0,(@1)", delay=0.5)
    stopping = asyncio.ensure_future(gw.emergency_stop(olga, "test", "psu"))
    assert await until(lambda: any(c == "OUTP 0,(@1)" for _, c in link.fired))
    assert "not_shown_off" in gw.stopped()["psu"], "no read-back has shown it off yet"
    async with gw.subscribe() as queue:
        gw.clear_stop(olga)
        alerts = []
        while not queue.empty():
            alerts.append(queue.get_nowait())
    done = await stopping
    assert on(front_panel, 1)  # the safe action failed, and the stop is cleared
    cleared = [e.data for e in gw.journal(f"bench:{gw.bench}", limit=1000)
               if e.type is EventType.STOP_CLEARED]
    assert "psu" in cleared[-1].get("not_shown_off", {}), cleared
    assert any("not every output was shown off" in a.get("reason", "") for a in alerts)
    result = done["instruments"]["psu"]
    assert result["errors"] and "tried again" not in result.get("retry", ""), result
    assert "cleared" in result["retry"]
    assert gw.stopped() == {}


async def test_a_clear_while_the_hold_sends_its_safe_action_is_not_reported_as_a_stop(
        faulty: tuple[Gateway, FaultLink], olga: Principal, front_panel: Any) -> None:
    """CH1 switched on at the panel under a stop; the hold's ``OUTP 0,(@1)`` hangs (then
    times out) and the stop is cleared meanwhile. The hold then journaled and alerted
    "psu is stopped, but CH1 on ...: it is tried again every watch period" after the clear:
    nothing tries again, and psu is not stopped."""
    gw, link = faulty
    await gw.emergency_stop(olga, "test", "psu")
    link.arm(Fault.WRITE_TIMEOUT, match="OUTP 0,(@1)", delay=0.5)
    switch_on_at_panel(front_panel, 1)
    assert await until(lambda: any(c == "OUTP 0,(@1)" for _, c in link.fired))
    async with gw.subscribe() as queue:
        gw.clear_stop(olga)
        assert await until(lambda: bool(enforced(gw)))
        alerts = []
        while not queue.empty():
            alerts.append(queue.get_nowait())
    assert on(front_panel, 1)  # the hold's try failed; cleared, the panel's CH1 is left on
    said = enforced(gw)[-1]
    assert "cleared" in said["cleared"], said
    told = [a["reason"] for a in alerts if a.get("alert") == "stop_enforced"]
    assert told and all("is stopped" not in t and "tried again" not in t for t in told), told
    assert "psu" not in gw.stopped()


async def test_a_slow_instrument_of_a_bench_stop_leaves_the_others_hold_quiet(
        sim: SimBenchThread, db_path: Path, olga: Principal, front_panel: Any) -> None:
    """A whole-bench stop: psu's safe action is done at once, the DP832's ``OUTP CH1,OFF``
    hangs. Meanwhile the watch looks at psu, every output off: nothing to say (a look that
    took psu's stop for one never shown off journaled it 'proven' at last)."""
    with SimServedThread("dp832") as served:
        cfg = served_bench(sim, "dp832", served, "dp832")
        cfg.policy.watch_seconds = 0.1
        dp832 = cfg.instrument("dp832")
        assert dp832 is not None
        dp832.timeout_ms = 1000
        link = FaultLink(PyvisaLink(dp832), "dp832")
        gw = Gateway(cfg, SqliteStore(db_path), links={"dp832": link})
        await gw.start()
        try:
            link.arm(Fault.WRITE_TIMEOUT, match="OUTP CH1,OFF", delay=1.0)
            checks = gw.watch.checks
            done = await gw.emergency_stop(olga, "test")
            assert gw.watch.checks > checks + 2  # the watch looked meanwhile
            assert not done["instruments"]["psu"]["errors"]
            assert await until(lambda: gw.watch.checks > checks + 6)
            assert [e for e in enforced(gw) if e["instrument"] == "psu"] == []
            assert "not_shown_off" not in gw.stopped()["psu"]
        finally:
            await gw.close()
            gw.store.close()
