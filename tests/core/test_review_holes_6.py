"""The sixth hostile review, of the newest code (the grant's overlapped commit and one lane
turn, the envelope watch, read plans, selections, the compound recheck). Each attack is
proven on the simulator's own port (never the gateway's word for it) and closed as a class
(docs/reliability.md section 7).

1. a write whose caller is cancelled: a plan step (or any execution) runs in its caller's
   task; the write's lane job runs to its end in the lane's driver even when that caller is
   cancelled (an MCP ``notifications/cancelled``, a session that ends), but the rest of the
   execution (the judged read-back, the receipt, the lease on what it switched on, the
   setpoint remembered) ran in the caller and was lost: the supply was on, the request stayed
   ``executing`` with no receipt, and no lease, so a lost client left the DUT energized.
2. a field nobody can read: an envelope on the SPD3303X's fixed CH3 made every watch check
   wait out two 2 s timeouts on the lane (a read of CH1 waited up to 4 s).
3. a list on the E36312A: ``VOLT:MODE LIST`` and ``*TRG`` (every approval) ran panel-stored
   points at 20 V, while ``VOLT?`` (the read-back's and the watch's view) stayed 3 V.
4. a closed run's selection stayed in the store and in memory for good.
5. a safe action reported done that did nothing (a supply locked by another interface):
   the watch said "ran at once" every second, the emergency stop said nothing was wrong.
6. a lost client's lease deleted after one failed safe action: CH1 stayed on for good.
7. a run closed while its granted write waited for the lane: the write ran for nobody.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench_gate import envelope
from bench_gate.config import BenchConfig, ChannelLimits
from bench_gate.gateway import Gateway
from bench_gate.instruments import PyvisaLink
from bench_gate.models import EventType, Principal, Status
from bench_gate.scpi import available_profiles, get_profile
from bench_gate.selections import SELECTIONS
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import own_port, served_bench
from tests.core.test_review_holes_2 import _everything
from tests.faults import Fault, FaultLink

PLAN = {"instrument": "psu", "channels": [1], "voltage": [0, 5], "current_max": "0.5",
        "output_enable": True, "max_writes": 10}


class SlowAfterWrite:
    """A link that holds the lane a moment on the first query after a matching write (the
    read-back of a write that has landed): the write's lane job is then certainly running,
    with the instrument already changed, when the test acts."""

    def __init__(self, inner: PyvisaLink, match: str, seconds: float) -> None:
        self.inner = inner
        self.match = match
        self.seconds = seconds
        self.landed = threading.Event()
        self.armed = False

    @property
    def opens(self) -> int:
        return self.inner.opens

    @property
    def connected(self) -> bool:
        return self.inner.connected

    def write(self, command: str) -> None:
        self.inner.write(command)
        if self.armed and self.match in command:
            self.armed = False
            self.inner.query("*OPC?")  # handled before another connection looks
            self.landed.set()
            time.sleep(self.seconds)

    def query(self, command: str, extra_seconds: float = 0.0) -> str:
        return self.inner.query(command, extra_seconds)

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
async def slow_gateway(config: BenchConfig, db_path: Path
                       ) -> AsyncIterator[tuple[Gateway, SlowAfterWrite]]:
    psu = config.instrument("psu")
    assert psu is not None
    link = SlowAfterWrite(PyvisaLink(psu), "OUTP 1", 0.5)
    gw = Gateway(config, SqliteStore(db_path), links={"psu": link})
    await gw.start()
    yield gw, link
    await gw.close()
    gw.store.close()


async def _until(check: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "did not happen in time"
        await asyncio.sleep(0.02)


def _psu(front_panel: Any, query: str) -> Decimal:
    return Decimal(str(front_panel.query(query)).strip())


# ------------------------------------------------------------ 1. a cancelled caller
async def test_a_write_whose_caller_is_cancelled_is_still_concluded_and_leased(
        slow_gateway: tuple[Gateway, SlowAfterWrite], front_panel: Any,
        olga: Principal, pete: Principal, script: Principal) -> None:
    """A plan step ``VOLT 2;CURR 0.4;OUTP ON`` on CH1, its caller cancelled once the output
    is on (an MCP tool call cancelled, a session ending): the supply is on (its own port),
    so the request must end ``executed`` with its receipt, and the run must hold a lease on
    CH1, so that losing the client switches it off (``on_client_lost = safe``). Before, the
    request stayed ``executing`` with no receipt and no lease: the DUT stayed on for good."""
    gw, link = slow_gateway
    gw.config.policy.lease_seconds = 1.0
    run = gw.create_run(script, "agent", goal="energize CH1 inside a plan")
    asked = await gw.request_plan(run.id, PLAN)
    await gw.grant(asked.id, olga, ["setpoint"], proposal_hash=asked.proposal_hash)
    done = await gw.grant(asked.id, pete, ["output_enable"], proposal_hash=asked.proposal_hash)
    assert done.request.status is Status.EXECUTED, done.message
    link.armed = True
    step = asyncio.ensure_future(gw.submit(run.id, "psu", "VOLT 2,(@1);:CURR 0.4,(@1);"
                                                          ":OUTP ON,(@1)"))
    await asyncio.to_thread(link.landed.wait, 10)
    step.cancel()
    with pytest.raises(asyncio.CancelledError):
        await step

    def concluded() -> bool:
        return not [r for r in gw.list_requests(run_id=run.id)
                    if r.status in (Status.APPROVED, Status.EXECUTING)]

    await _until(concluded, 5)
    assert _psu(front_panel, "OUTP? (@1)") == 1  # the write landed: the DUT is energized
    req = next(gw.get_request(r.id) for r in gw.list_requests(run_id=run.id)
               if r.message.startswith("VOLT 2"))
    assert req.status is Status.EXECUTED, (req.status, req.outcome)
    assert req.receipt is not None and req.receipt.after.get("ch1.output") == "1"
    assert [(x["instrument"], x["channels"]) for x in gw.leases()] == [("psu", [1])]
    # The client is gone: its lease runs out and the safe action switches CH1 off.
    gw.client_connected(run.id, False)
    await _until(lambda: _psu(front_panel, "OUTP? (@1)") == 0, 5)


# ------------------------------------------------------------ 2. a field nobody can read
SPD_CH3 = {1: ChannelLimits(voltage=Decimal(12), current=Decimal(1)),
           3: ChannelLimits(voltage=Decimal(5), current=Decimal("3.2"))}


@pytest.fixture
async def spd_gateway(sim: SimBenchThread, db_path: Path
                      ) -> AsyncIterator[tuple[Gateway, SimServedThread]]:
    with SimServedThread("spd3303x") as served:
        gw = Gateway(served_bench(sim, "spd", served, "spd3303x", SPD_CH3), SqliteStore(db_path))
        await gw.start()
        yield gw, served
        await gw.close()
        gw.store.close()


async def test_the_watch_never_holds_the_lane_asking_what_a_channel_cannot_answer(
        spd_gateway: tuple[Gateway, SimServedThread], script: Principal,
        olga: Principal) -> None:
    """An envelope on the SPD3303X's fixed CH3 (docs/profiles.md: it has no readable state,
    so it counts as outside and fails closed): every watch check asked ``CH3:VOLT?`` and
    ``CH3:CURR?``, which the supply never answers, so each waited out the link's 2 s timeout
    and dropped the connection; the lane was held about 4 s of every 5, a read of CH1 waited
    up to 4 s, and every write's read-back timed out too and ended ``ambiguous``. A field the
    profile says a channel lacks is never asked: it counts as unreadable (outside), as
    before, so CH3 still gets its safe action and the breach is journaled."""
    gw, served = spd_gateway
    run = gw.create_run(script, "script", goal="read CH1 while the watch looks")
    start = gw.watch.checks
    worst = 0.0
    while gw.watch.checks < start + 3:
        began = time.monotonic()
        done = await gw.submit(run.id, "spd", "CH1:VOLT?")
        assert done.status == "executed", done
        worst = max(worst, time.monotonic() - began)
        await asyncio.sleep(0.05)
    assert worst < 2.0, f"a read of CH1 waited {worst:.1f} s behind the watch"
    found = [e.data for e in gw.journal(f"bench:{gw.bench}", limit=100)
             if e.type is EventType.ENVELOPE_BREACH]
    assert found and found[0]["safe_action"] == ["OUTP CH3,OFF"], found  # still fails closed
    asked = await gw.submit(run.id, "spd", "CH1:VOLT 2")
    assert asked.request is not None
    done_write = await gw.grant(asked.request.id, olga, ["setpoint"],
                                proposal_hash=asked.request.proposal_hash)
    assert done_write.request.status is Status.EXECUTED, done_write.message
    with own_port(served.resource_name) as res:
        assert Decimal(res.query("CH1:VOLT?")) == 2


# ------------------------------------------------------------ 3. a list on the E36312A
@pytest.mark.parametrize("mode", ["VOLT:MODE LIST,(@2)", "CURR:MODE LIST,(@2)",
                                  ":SOUR:VOLT:MODE list,(@2)", "volt:mode list,(@2)"])
async def test_the_e36312a_never_runs_a_list_through_the_gateway(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any, mode: str) -> None:
    """CH2 on at 3 V under its 12 V envelope, list points 3 V and 20 V for CH2 stored at the
    panel (or under an envelope since tightened: the gateway judged them against nothing
    now). ``VOLT:MODE LIST,(@2)`` and ``*TRG`` (each every approval) ran: Keysight's list
    steps the output through its points and keeps the immediate level (``VOLT?`` still 3 V,
    what the read-back and the watch read), so both said nothing while CH2 put 20 V on the
    DUT. LIST is refused (-224, with why); FIXed and STEP are taken."""
    for command in ("VOLT 3,(@2)", "CURR 0.5,(@2)", "OUTP 1,(@2)",
                    "LIST:VOLT 3,20,(@2)", "LIST:DWEL 0.1,5,(@2)"):
        front_panel.write(command)
    run = gateway.create_run(script, "script", goal="step CH2")
    entered = await _everything(gateway, run.id, "psu", mode, olga, pete)
    assert getattr(entered, "status", None) == "refused" and entered.code == -224, entered
    assert "read-back" in entered.reason, entered.reason
    fired = await _everything(gateway, run.id, "psu", "*TRG", olga, pete)
    # review 5: the list's points are read and judged, so the trigger is refused (-222)
    assert getattr(fired, "status", None) == "refused" and fired.code == -222, fired
    await asyncio.sleep(0.4)
    # 3 V as set, or 0 V if the watch met the stored 20 V point first and switched CH2 off
    # (it may, on a slow machine): never the list's 20 V.
    assert _psu(front_panel, "MEAS:VOLT? (@2)") in (0, 3), "the list ran: CH2 left its envelope"
    front_panel.write("LIST:VOLT 3,5,(@2)")  # points inside: modes are taken again
    for fine in ("VOLT:MODE FIX,(@2)", "VOLT:MODE STEP,(@2)"):
        done = await _everything(gateway, run.id, "psu", fine, olga, pete)
        assert done.request.status is Status.EXECUTED, (fine, done.message)


def test_the_simulated_e36312a_runs_its_list_after_a_trigger(sim: SimBenchThread) -> None:
    """The model the test above relies on: in LIST mode a trigger steps the output through
    the points for their dwell, while ``VOLT?`` keeps the immediate level, then the output
    returns to it."""
    inst = sim.psu
    for message in ("VOLT 3,(@2)", "CURR 0.5,(@2)", "OUTP 1,(@2)"):
        inst.handle_message(message)
    for unit in ("LIST:VOLT 3.0,20.0,(@2)", "LIST:DWEL 0.1,0.3,(@2)", "VOLT:MODE LIST,(@2)",
                 "*TRG"):
        inst.execute(unit, False)
    time.sleep(0.2)
    assert inst.probe(2)[0] == 20.0
    assert Decimal(str(inst.handle_message("VOLT? (@2)"))) == 3
    time.sleep(0.4)
    assert inst.probe(2)[0] == 3.0


# ------------------------------------------------------------ 4. a closed run's selection
async def test_a_closed_runs_selection_leaves_the_store(
        gateway: Gateway, script: Principal) -> None:
    """Each socket-door connection is a run; a script that reconnects for each reading and
    selects CH2 (``INST:NSEL 2;:VOLT?``) left one selections row (and an entry in memory)
    per connection for good. A closed run runs nothing more: its selection goes with it,
    and an open run keeps its own."""
    kept = gateway.create_run(script, "script", goal="stays open")
    assert (await gateway.submit(kept.id, "psu", "INST:NSEL 3;:VOLT?")).status == "executed"
    for _ in range(5):
        run = gateway.create_run(script, "script", goal="one reading")
        done = await gateway.submit(run.id, "psu", "INST:NSEL 2;:VOLT?")
        assert done.status == "executed", done
        gateway.close_run(run.id)
    rows = [data for _, data in gateway.store.kv_items(SELECTIONS)]
    assert [(r["run_id"], r["channel"]) for r in rows] == [(kept.id, 3)], rows
    after = await gateway.submit(kept.id, "psu", "VOLT 1")  # still CH3 for the open run
    assert after.request is not None and after.request.actions[0].channel == 3


@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_a_field_a_channel_lacks_is_never_asked_and_always_outside(data: st.DataObject) -> None:
    """For every shipped profile and any envelope over any of its channels: what the watch
    and a read-back ask (``readable_fields``) is only what the profile can read on that
    channel, and a limited channel whose fields go unread is always judged outside, never
    passed over (fail closed, as before: only the waiting is gone)."""
    profile = get_profile(data.draw(st.sampled_from(
        [n for n in available_profiles() if get_profile(n).channels])))
    channels = data.draw(st.sets(st.sampled_from(profile.channels), min_size=1))
    limits = {ch: ChannelLimits(voltage=Decimal(5), current=Decimal(1)) for ch in channels}
    asked = envelope.readable_fields(profile, limits)
    assert all(profile.has_field(f, ch) for ch, f in asked)
    assert set(asked) <= set(envelope.enveloped_fields(profile, limits))
    lacking = {ch for ch, f in envelope.enveloped_fields(profile, limits)
               if not profile.has_field(f, ch)}
    # Every field it may ask answers inside: only a channel with a field it cannot read is out.
    inside = {f"ch{ch}.{f}": "0" for ch, f in asked}
    found = {b.channel for b in envelope.breaches(profile, limits, inside, set(limits))}
    assert found == lacking & {ch for ch in lacking if envelope.bounded(profile, limits[ch])}


# ------------------------------------------------------------ 5. a safe action with no effect
async def test_a_safe_action_that_changes_nothing_is_never_reported_as_done(
        config: BenchConfig, db_path: Path, sim: SimBenchThread, front_panel: Any) -> None:
    """Another LAN client holds the E36312A's interface lock (SYSTem:LOCK), so the
    gateway's commands are refused by the supply while its queries still answer; CH3 is put
    at 15 V and on at the panel. Every second the watch sent ``OUTP 0,(@3)``, which changed
    nothing, and journaled and alerted "the safe action ... ran at once": untrue, and once a
    second for good. The check read after the safe action now decides: a channel that still
    reads on is a failed safe action (said so, journaled once, as any failure)."""
    with own_port(sim.psu_resource_name) as other:
        assert other.query("SYST:LOCK:REQ?") == "1"
        for command in ("VOLT 15,(@3)", "CURR 0.2,(@3)", "OUTP 1,(@3)"):
            front_panel.write(command)
        gw = Gateway(config, SqliteStore(db_path))
        await gw.start()
        try:
            async with gw.subscribe() as queue:
                await _until(lambda: gw.watch.checks >= 4, 10)
                alerts = []
                while not queue.empty():
                    alerts.append(queue.get_nowait())
            found = [e.data for e in gw.journal(f"bench:{gw.bench}", limit=100)
                     if e.type is EventType.ENVELOPE_BREACH]
        finally:
            await gw.close()
            gw.store.close()
        assert _psu(front_panel, "OUTP? (@3)") == 1  # the lock kept it on: nobody can here
        assert len(found) == 1, found
        assert found[0]["error"] and "still" in found[0]["error"], found[0]
        reasons = [a.get("reason", "") for a in alerts if a.get("alert") == "envelope_breach"]
        assert reasons and all("ran at once" not in r for r in reasons), reasons
        other.write("SYST:LOCK:REL")


async def test_an_emergency_stop_never_reports_an_output_off_that_still_reads_on(
        config: BenchConfig, db_path: Path, sim: SimBenchThread, front_panel: Any,
        olga: Principal) -> None:
    """The same lock, CH3 on at 15 V: the emergency stop sent its safe actions, read CH3
    back on, and returned no error (the MCP tool then told the agent "outputs off"). The
    stop's result now names the channel that still reads on, as an error."""
    with own_port(sim.psu_resource_name) as other:
        assert other.query("SYST:LOCK:REQ?") == "1"
        for command in ("VOLT 15,(@3)", "CURR 0.2,(@3)", "OUTP 1,(@3)"):
            front_panel.write(command)
        config.policy.watch_seconds = 0  # the stop alone
        gw = Gateway(config, SqliteStore(db_path))
        await gw.start()
        try:
            done = await gw.emergency_stop(olga, "test", "psu")
        finally:
            await gw.close()
            gw.store.close()
        assert _psu(front_panel, "OUTP? (@3)") == 1
        psu = done["instruments"]["psu"]
        assert psu["read_back"]["ch3.output"] == "1"
        assert any("CH3 still reads on" in e for e in psu["errors"]), psu
        other.write("SYST:LOCK:REL")


# ------------------------------------------------------------ 6. a lease's failed safe action
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


async def test_a_lost_clients_output_is_switched_off_even_after_a_failed_try(
        faulty: tuple[Gateway, FaultLink], front_panel: Any, script: Principal,
        olga: Principal, pete: Principal) -> None:
    """A run switched CH1 on (every approval), then its client was lost. When its lease
    ran out, the safe action's ``OUTP 0,(@1)`` timed out once (the supply busy, a cable
    pulled for a moment): the lease was deleted anyway, the alert said "its outputs were
    switched off", and nothing ever tried again: CH1 stayed on, unattended, for good. The
    safe action is now read back; a lease not shown off stays and is tried again."""
    gw, link = faulty
    gw.config.policy.lease_seconds = 1.0
    run = gw.create_run(script, "script", goal="energize CH1")
    done = await _everything(gw, run.id, "psu", "VOLT 2,(@1);:CURR 0.4,(@1);:OUTP ON,(@1)",
                             olga, pete)
    assert done.request.status is Status.EXECUTED, done.message
    assert [(x["instrument"], x["channels"]) for x in gw.leases()] == [("psu", [1])]
    link.arm(Fault.WRITE_TIMEOUT, match="OUTP 0", times=1)
    async with gw.subscribe() as queue:
        gw.client_connected(run.id, False)
        await _until(lambda: _psu(front_panel, "OUTP? (@1)") == 0, 8)
        alerts = []
        while not queue.empty():
            alerts.append(queue.get_nowait())
    assert link.fired, "the fault never fired: the test proves nothing"
    reasons = [a.get("reason", "") for a in alerts if a.get("alert") == "client_lost"]
    assert any("the safe action failed" in r for r in reasons), reasons
    # The simulator reads off a moment before the gateway has read it back and let go.
    await _until(lambda: gw.leases() == [], 5)


# ------------------------------------------------------------ 7. a run closed during the wait
async def test_a_run_closed_while_its_granted_write_waits_for_the_lane_writes_nothing(
        gateway: Gateway, front_panel: Any, script: Principal, olga: Principal,
        pete: Principal) -> None:
    """The last approval commits the request ``executing`` while the lane is still busy
    (here a job holding it 1 s: a slow reading, a safe action elsewhere); the client goes
    meanwhile and its run is closed. Closing cancels only what is undecided or approved, so
    the write ran when the lane came free, energizing CH1 for nobody (its lease only ran
    out ``lease_seconds`` later). The recheck on the write's own lane turn now refuses a
    closed run's write: nothing is written."""
    run = gateway.create_run(script, "script", goal="energize CH1")
    asked = await gateway.submit(run.id, "psu", "VOLT 2,(@1);:CURR 0.4,(@1);:OUTP ON,(@1)")
    req = asked.request
    assert req is not None
    await gateway.grant(req.id, olga, ["setpoint"], proposal_hash=req.proposal_hash)
    lane = gateway.instruments["psu"].lane
    holding = asyncio.ensure_future(lane.run(lambda link: asyncio.sleep(1.0)))
    await asyncio.sleep(0.1)
    granting = asyncio.ensure_future(gateway.grant(req.id, pete, ["output_enable"],
                                                   proposal_hash=req.proposal_hash))
    await _until(lambda: gateway.get_request(req.id).status is Status.EXECUTING, 5)
    gateway.close_run(run.id, "the requester disconnected")
    await holding
    final = (await granting).request
    assert final.status is Status.FAILED, (final.status, final.outcome)
    assert "closed" in (final.outcome or "")
    assert _psu(front_panel, "OUTP? (@1)") == 0 and _psu(front_panel, "VOLT? (@1)") == 0
