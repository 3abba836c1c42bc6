"""Answers out of step, late, cut off; a slow instrument; a safe action on an answer out
of step: the gateway never writes on, or reports done from, an answer that may be another
query's. The PSU is a real simulator behind a lying raw-socket server
(tests/liar_instrument.py) reached as a ``TCPIP0::…::SOCKET`` resource (and through pyvisa
where the link matters); what it really did is read on the simulator's own port."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bench_gate.config import BenchConfig, ChannelLimits, default_config
from bench_gate.errors import InstrumentError
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import Clock, own_port, served_bench
from tests.liar_instrument import LyingInstrument, gw, liar, lied_config, lied_gateway

__all__ = ["gw", "liar", "lied_config"]  # the fixtures, for pytest


async def _in_step_again(gw: Gateway, *, run_id: str, olga: Principal, front_panel: Any,
                         current: str) -> None:
    """A fresh request is held on the panel's state (CH1's ``current``) and runs."""
    again = (await gw.submit(run_id, "psu", "VOLT 3,(@1)")).request
    assert again is not None and again.snapshot.values["ch1.current"] == current
    ran = (await gw.grant(again.id, olga, ["setpoint"],
                          proposal_hash=again.proposal_hash)).request
    assert ran.status is Status.EXECUTED, ran.outcome
    assert Decimal(front_panel.query("VOLT? (@1)")) == 3


# ------------------------------------------------ an answer ahead of its time: out of step
@pytest.mark.parametrize("io", ["auto", "pyvisa"])
@pytest.mark.parametrize("gap", [0.0, 0.05])
async def test_a_stale_answer_at_the_recheck_writes_nothing(
        lied_config: BenchConfig, db_path: Path, clock: Clock, liar: LyingInstrument,
        script: Principal, olga: Principal, front_panel: Any, io: str, gap: float) -> None:
    """The panel moves CH1's current limit after the approver looked. At the recheck the
    instrument sends the answer it gave at submit first (in the same packet, or 50 ms
    before the real one): the recheck read the state the approver saw, passed, and wrote
    on it (on the raw-socket link, which then found the real answer waiting and quietly
    reconnected; through pyvisa every later answer was one behind). Now ``*IDN?`` after
    the recheck gets the real answer where the identity belongs: nothing is written, the
    connection is dropped, and the next write runs on answers in step."""
    gw = lied_gateway(lied_config, db_path, clock, io)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        req = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
        assert req is not None
        front_panel.write("CURR 0.8,(@1)")  # after the approver looked: this must go stale
        liar.stale_first("*IDN?", gap=gap)
        done = (await gw.grant(req.id, olga, ["setpoint"],
                               proposal_hash=req.proposal_hash)).request
        assert done.status is Status.FAILED, done.outcome
        assert "out of step" in (done.outcome or "")
        assert "nothing was written" in (done.outcome or "")
        assert Decimal(front_panel.query("VOLT? (@1)")) == 0
        assert not any(line.startswith("VOLT 2") for line in liar.received)
        # In step again: a fresh request is held on the panel's state and runs.
        await _in_step_again(gw, run_id=run.id, olga=olga, front_panel=front_panel,
                             current="0.8")
    finally:
        await gw.close()
        gw.store.close()


@pytest.mark.parametrize("io", ["auto", "pyvisa"])
async def test_a_stale_answer_at_the_read_back_is_no_read_back(
        lied_config: BenchConfig, db_path: Path, clock: Clock, liar: LyingInstrument,
        script: Principal, olga: Principal, front_panel: Any, io: str) -> None:
    """After the write the instrument sends the recheck's answer (the state before the
    write) ahead of the read-back's: the read-back read the old state and the request was
    reported ``failed``, "nothing took effect", with the write on the instrument. Now it
    is no read-back: ``ambiguous``, a person must check."""
    gw = lied_gateway(lied_config, db_path, clock, io)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        req = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
        assert req is not None
        liar.stale_first("*IDN?", gap=0.05, after="VOLT 2.0,(@1)")
        done = (await gw.grant(req.id, olga, ["setpoint"],
                               proposal_hash=req.proposal_hash)).request
        assert liar.fired, "the stale answer was sent"
        assert done.status is Status.AMBIGUOUS, done.outcome
        assert "could not be read back" in (done.outcome or "")
        assert "out of step" in (done.outcome or "")
        assert Decimal(front_panel.query("VOLT? (@1)")) == 2, "the write landed"
    finally:
        await gw.close()
        gw.store.close()


# ------------------------------------------------------ late answers, drops, power cycles
@pytest.mark.parametrize("io", ["auto", "pyvisa"])
async def test_a_recheck_answered_after_the_timeout_writes_nothing_and_stays_in_step(
        lied_config: BenchConfig, db_path: Path, clock: Clock, liar: LyingInstrument,
        script: Principal, olga: Principal, front_panel: Any, io: str) -> None:
    """Held. The recheck's answer comes 1.5 s late (the timeout is 1 s): nothing is written,
    and the late answer is never read as the next query's (the link starts again): the next
    request shows the panel's own state and runs. (Held already; kept as a guard.)"""
    gw = lied_gateway(lied_config, db_path, clock, io)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        req = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
        assert req is not None
        liar.late("*IDN?", 1.5)
        done = (await gw.grant(req.id, olga, ["setpoint"],
                               proposal_hash=req.proposal_hash)).request
        assert done.status is Status.FAILED and "timed out" in (done.outcome or "")
        assert "nothing was written" in (done.outcome or "")
        front_panel.write("CURR 0.7,(@1)")
        await _in_step_again(gw, run_id=run.id, olga=olga, front_panel=front_panel,
                             current="0.7")
    finally:
        await gw.close()
        gw.store.close()


@pytest.mark.parametrize("where, landed, status, volts", [
    ("*IDN?", False, Status.FAILED, 0),             # mid-recheck: nothing written
    ("VOLT 2.0,(@1)", False, Status.AMBIGUOUS, 0),  # mid-write, lost: unknown, not done
    ("VOLT 2.0,(@1)", True, Status.AMBIGUOUS, 2),   # mid-write, landed: unknown, not done
])
async def test_a_connection_dropped_mid_write_ends_as_the_read_back_shows(
        gw: Gateway, liar: LyingInstrument, script: Principal, olga: Principal,
        front_panel: Any, where: str, landed: bool, status: Status, volts: int) -> None:
    """Held. A drop on the recheck writes nothing; a drop on the write itself (the bytes
    passed on or not) leaves no read-back on that connection: ``ambiguous``, a person
    checks, never ``executed`` or ``failed`` on a guess."""
    run = gw.create_run(script, "script")
    req = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
    assert req is not None
    liar.drop(where, landed)
    done = (await gw.grant(req.id, olga, ["setpoint"],
                           proposal_hash=req.proposal_hash)).request
    assert liar.fired
    assert done.status is status, done.outcome
    assert Decimal(front_panel.query("VOLT? (@1)")) == volts


async def test_a_connection_dropped_mid_read_back_is_ambiguous_and_the_channel_judged(
        gw: Gateway, liar: LyingInstrument, script: Principal, olga: Principal,
        front_panel: Any) -> None:
    """Held. The read-back's connection drops: ``ambiguous``, never ``executed``; every
    enveloped field is read again on a new connection and CH1 judged on it."""
    run = gw.create_run(script, "script")
    req = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
    assert req is not None
    liar.drop("*IDN?", landed=False, after="VOLT 2.0,(@1)")
    done = (await gw.grant(req.id, olga, ["setpoint"],
                           proposal_hash=req.proposal_hash)).request
    assert liar.fired
    assert done.status is Status.AMBIGUOUS, done.outcome
    assert "could not be read back" in (done.outcome or "")
    assert Decimal(front_panel.query("VOLT? (@1)")) == 2


async def test_a_power_cycle_between_approval_and_write_goes_stale(
        gw: Gateway, liar: LyingInstrument, script: Principal, olga: Principal,
        front_panel: Any) -> None:
    """Held. The supply restarts between the approval and the write (its connections cut,
    its state back to power-on defaults): the recheck finds the difference, the request
    goes stale with a fresh one for a person, nothing is written."""
    front_panel.write("CURR 0.5,(@1)")
    front_panel.write("VOLT 1,(@1)")
    front_panel.write("OUTP ON,(@1)")
    run = gw.create_run(script, "script")
    req = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
    assert req is not None
    liar.cut()
    front_panel.write("*RST")
    await asyncio.sleep(0.2)  # the gateway's end of the cut connection sees it close
    done = (await gw.grant(req.id, olga, ["setpoint"],
                           proposal_hash=req.proposal_hash)).request
    assert done.status is Status.STALE, done.outcome
    assert Decimal(front_panel.query("VOLT? (@1)")) == 0
    assert front_panel.query("OUTP? (@1)") == "0"


# ------------------------------------------------------------ a slow instrument, a stop
async def test_a_stop_does_not_wait_for_the_watch_to_read_a_slow_supply_field_by_field(
        gw: Gateway, liar: LyingInstrument, olga: Principal, sim: SimBenchThread) -> None:
    """The supply answers every query 0.4 s late (inside its 1 s timeout). The watch
    reads its enveloped fields one by one (34 queries, about 14 s); an emergency stop
    pressed meanwhile waited for all of them: CH1 went off about 9 s later. Now the watch
    stops asking once a safe action waits for the lane: CH1 is off within about one
    answer's time."""
    with own_port(sim.psu_resource_name, panel=True) as panel:
        for text in ("CURR 0.5,(@1)", "VOLT 1,(@1)", "OUTP ON,(@1)"):
            panel.write(text)
        liar.late("?", 0.4, times=100_000)
        seen = len(liar.received)
        watching = asyncio.ensure_future(gw.watch.check(gw.core.instrument("psu")))
        for _ in range(500):
            if len(liar.received) >= seen + 2:  # the watch is reading field by field
                break
            await asyncio.sleep(0.01)
        pressed = time.monotonic()
        stopping = asyncio.ensure_future(gw.emergency_stop(olga, "api"))
        while await asyncio.to_thread(panel.query, "OUTP? (@1)") != "0":
            assert time.monotonic() - pressed < 2.0, "the stop waited for the watch"
            await asyncio.sleep(0.02)
        liar.calm()
        await stopping
        assert await watching is None  # cut short: nothing read was outside


async def test_a_slow_supply_never_holds_the_stop_of_another_one(
        sim: SimBenchThread, liar: LyingInstrument, db_path: Path, clock: Clock,
        olga: Principal) -> None:
    """Held. The PSU answers every query 2 s late (inside its 3 s timeout) and its lane is
    busy with the watch; a second supply (a DP832 on its own port) is switched off at
    once by the stop, and the PSU as soon as its current answer is in."""
    with SimServedThread("dp832") as other:
        cfg = served_bench(sim, "dp832", other, "dp832",
                           {1: ChannelLimits(voltage=Decimal(12), current=Decimal(1))})
        cfg.instruments[0].resource = liar.resource
        cfg.instruments[0].timeout_ms = 3000
        gw = Gateway(cfg, SqliteStore(db_path), clock=clock)
        await gw.start()
        try:
            with own_port(sim.psu_resource_name, panel=True) as psu, \
                    own_port(other.resource_name, panel=True) as dp:
                for text in ("CURR 0.5,(@1)", "VOLT 1,(@1)", "OUTP ON,(@1)"):
                    psu.write(text)
                dp.write("SOUR1:VOLT 1;:OUTP CH1,ON")
                liar.late("?", 2.0, times=100_000)
                seen = len(liar.received)
                watching = asyncio.ensure_future(gw.watch.check(gw.core.instrument("psu")))
                for _ in range(500):
                    if len(liar.received) > seen:
                        break
                    await asyncio.sleep(0.01)
                pressed = time.monotonic()
                stopping = asyncio.ensure_future(gw.emergency_stop(olga, "api"))
                while await asyncio.to_thread(dp.query, "OUTP? CH1") != "OFF":
                    assert time.monotonic() - pressed < 1.0, "the DP832 waited for the PSU"
                    await asyncio.sleep(0.02)
                while await asyncio.to_thread(psu.query, "OUTP? (@1)") != "0":
                    assert time.monotonic() - pressed < 3.0, "the PSU's stop waited"
                    await asyncio.sleep(0.02)
                liar.calm()
                await stopping
                await watching
        finally:
            await gw.close()
            gw.store.close()


# ------------------------------------------------- a safe action confirmed out of step
async def test_a_safe_action_confirmed_by_an_answer_out_of_step_is_not_done(
        sim: SimBenchThread, liar: LyingInstrument, db_path: Path, clock: Clock,
        front_panel: Any) -> None:
    """CH1 at 4 V over a 3 V limit; the watch sends ``OUTP 0,(@1)``, which the supply
    ignores, and its confirmation gets an answer ahead of its time saying off: the watch
    reported the safe action done with CH1 on at 4 V. Now the confirmation ends with the
    sync point too: "the safe action failed (… out of step …)", journaled and alerted."""
    cfg = default_config(liar.port, sim.dmm_port)
    cfg.instruments[0].timeout_ms = 1000
    cfg.envelope["psu"][1] = ChannelLimits(voltage=Decimal(3), current=Decimal(1))
    for text in ("CURR 0.5,(@1)", "VOLT 4,(@1)", "OUTP ON,(@1)"):
        front_panel.write(text)
    idn = front_panel.query("*IDN?")
    gw = Gateway(cfg, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        liar.calm()
        liar.refuse("OUTP 0,(@1)", times=100)
        liar.ahead(":OUTP? (@1);", f"0;{idn}", times=100)
        safed = await gw.watch.check(gw.core.instrument("psu"))
        assert safed is not None and "OUTP 0,(@1)" in safed.sent
        assert front_panel.query("OUTP? (@1)") == "1", "the supply ignored it"
        assert safed.error is not None and "out of step" in safed.error, safed.error
    finally:
        liar.calm()
        await gw.close()
        gw.store.close()


async def test_an_emergency_stop_confirmed_by_an_answer_out_of_step_is_not_done(
        gw: Gateway, liar: LyingInstrument, olga: Principal, front_panel: Any) -> None:
    """The stop's ``OUTP 0,(@3)`` is ignored and its read-back of CH3 gets "0" ahead of the
    real "1": the stop reported CH3 safe, no error, with CH3 on. Now it names the error."""
    for text in ("CURR 0.1,(@3)", "VOLT 1,(@3)", "OUTP ON,(@3)"):
        front_panel.write(text)
    liar.refuse("OUTP 0,(@3)", times=100)
    liar.ahead("OUTP? (@3)", "0", times=100)
    done = await gw.emergency_stop(olga, "api", "psu")
    assert front_panel.query("OUTP? (@3)") == "1", "the supply ignored it"
    errors = done["instruments"]["psu"]["errors"]
    assert any("out of step" in e for e in errors), done["instruments"]["psu"]



@pytest.mark.parametrize("io", ["auto", "pyvisa"])
async def test_an_answer_cut_in_two_by_a_pause_is_read_whole(
        lied_config: BenchConfig, db_path: Path, clock: Clock, liar: LyingInstrument,
        script: Principal, front_panel: Any, io: str) -> None:
    """Held. An answer with a 0.7 s pause in the middle (inside the 1 s timeout) is read
    whole, through the raw socket and through pyvisa (pyvisa-py waits for the terminator on
    a socket: VI_ATTR_SUPPRESS_END_EN), never cut with its rest left for the next query."""
    gw = lied_gateway(lied_config, db_path, clock, io)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        liar.split("*IDN?", 0.7)
        first = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
        assert liar.fired and first is not None
        front_panel.write("CURR 0.7,(@1)")
        again = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
        assert again is not None and again.snapshot.values["ch1.current"] == "0.7"
    finally:
        await gw.close()
        gw.store.close()


@pytest.mark.parametrize("io", ["auto", "pyvisa"])
async def test_an_unreadable_answer_leaves_nothing_for_the_next_query(
        lied_config: BenchConfig, db_path: Path, clock: Clock, liar: LyingInstrument,
        script: Principal, front_panel: Any, io: str) -> None:
    """A line of junk ahead of the snapshot's answer: the snapshot is unreadable (nothing
    held). Through pyvisa the real answer stayed on the connection and was the next
    query's: the next request was held on the state from before the panel moved (the
    approver shown a stale picture), and every later answer stayed one behind. An answer
    the gateway cannot read now drops the connection."""
    gw = lied_gateway(lied_config, db_path, clock, io)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        liar.ahead("*IDN?", "junk")
        with pytest.raises(InstrumentError):
            await gw.submit(run.id, "psu", "VOLT 2,(@1)")
        front_panel.write("CURR 0.7,(@1)")
        again = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
        assert again is not None and again.snapshot.values["ch1.current"] == "0.7", \
            again.snapshot.values
        assert (await gw.submit(run.id, "psu", "CURR? (@1)")).response == "+7.00000000E-01"
    finally:
        await gw.close()
        gw.store.close()
