"""The fourth hostile review, SCPI language layer: what a message means to the instrument
(its manual) against what the gateway judged and sent, each proven on the simulator's own
port through a door a real user has (docs/reliability.md section 7).

1. A relative header keeps the numeric suffix of its path (SCPI-99 Vol. 1 §6.2.4):
   ``:SOUR2:VOLT 5;CURR 0.2`` on the DP832 is ``SOUR2:CURR 0.2``; the gateway dropped the
   suffix and set CH1's current limit instead, leaving CH2's where it was.
2. A run's channel selection survives a restart: after ``INST:NSEL 2`` an HTTP run's
   ``VOLT 2.5`` went to CH1 once the gateway had restarted (the selection lived in memory
   only, so the instrument's own selection, or the profile's default, decided).
3. MIN and MAX as the manual counts them: on the E3631A's -25V output MIN is 0 V and MAX
   -25.75 V (User's Guide, Table 4-1); the gateway read the range's ends, so a script's
   ``VOLT MIN`` (to park the output at zero) was sent as ``VOLT -25.75``.
4. ``*CLS`` inside a held write reached the instrument: the read path answers it itself,
   the executor wrote it.
5. A unit that acts on a channel but names none (``CURR:PROT:STAT 0`` on the E36312A, with
   no selection on the run) was shown without a channel and sent bare, so it acted on
   whatever channel the instrument had selected when it ran.
6. ``*RST`` puts the E3631A's selection back to the +6V output (User's Guide, *RST: the
   power-on state); the run's selection stayed on P25V, so the next ``VOLT 3`` set P25V.
7. ``APPLy`` selects its output on the E3631A (User's Guide, "Using the APPLy command"):
   after ``APPL P25V,5,0.1`` a bare ``VOLT 3`` went to P6V; ``APPL P25V`` alone (a
   selection) was refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import pyvisa

from bench_gate.config import BenchConfig, ChannelLimits, InstrumentConfig
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import Clock, served_bench
from tests.doors.proxy.test_proxy import POLL, POLLS, in_thread

LIMITS = {1: ChannelLimits(voltage=Decimal(12), current=Decimal(2)),
          2: ChannelLimits(voltage=Decimal(12), current=Decimal(2)),
          3: ChannelLimits(voltage=Decimal(5), current=Decimal(2))}


@pytest.fixture
def dp832_sim() -> Iterator[SimServedThread]:
    with SimServedThread("dp832") as served:
        yield served


@pytest.fixture
def e3631a_sim() -> Iterator[SimServedThread]:
    with SimServedThread("e3631a") as served:
        yield served


@pytest.fixture
def config(sim: SimBenchThread, dp832_sim: SimServedThread, e3631a_sim: SimServedThread
           ) -> BenchConfig:
    cfg = served_bench(sim, "dp832", dp832_sim, "dp832", LIMITS)
    cfg.instruments.append(InstrumentConfig(name="e3631a", resource=e3631a_sim.resource_name,
                                            profile="e3631a", socket_port=0))
    # The -25V output may reach its full 25.75 V here: the envelope is not what decides.
    cfg.envelope["e3631a"] = {1: ChannelLimits(voltage=Decimal(6), current=Decimal(1)),
                              2: ChannelLimits(voltage=Decimal(26), current=Decimal(1)),
                              3: ChannelLimits(voltage=Decimal(26), current=Decimal(1))}
    return cfg


async def _pending(gateway: Gateway, seen: set[str]) -> Any:
    for _ in range(POLLS):
        for req in gateway.store.list_requests(status=Status.PENDING):
            if req.id not in seen:
                return gateway.get_request(req.id)
        await asyncio.sleep(POLL)
    raise AssertionError("no pending request showed up")


async def _grant_all(gateway: Gateway, req: Any, *people: Principal) -> None:
    for who, kind in zip(people * 3, [k.value for k in req.missing()], strict=False):
        await gateway.grant(req.id, who, [kind], proposal_hash=req.proposal_hash)


@pytest.fixture
def dp832_port(dp832_sim: SimServedThread) -> Iterator[Any]:
    """The DP832's own port, open beside the door's clients (``own_port`` closes pyvisa's
    shared resource manager, and with it every client)."""
    rm = pyvisa.ResourceManager("@py")
    res = rm.open_resource(dp832_sim.resource_name, read_termination="\n",
                           write_termination="\n", timeout=4000)
    yield res
    res.close()
    rm.close()


def _levels(port: Any, channel: int) -> tuple[Decimal, Decimal]:
    return (Decimal(port.query(f"SOUR{channel}:VOLT?")),
            Decimal(port.query(f"SOUR{channel}:CURR?")))


# ------------------------------------------------------------------ 1. a suffix in the path
@pytest.mark.parametrize("message", [":SOUR2:VOLT 5;CURR 0.2", "SOURce2:CURRent 0.2;VOLTage 5",
                                     ":SOUR2:VOLT:PROT 20;:SOUR2:VOLT 5;CURR 0.2"])
async def test_a_relative_header_keeps_the_channel_its_path_names(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal, pete: Principal,
        dp832_port: Any, message: str) -> None:
    """SCPI-99 Vol. 1 §6.2.4 (and the Keysight guides: the path is "the characters up to and
    including the last colon" of the previous header): after ``:SOUR2:VOLT 5`` a bare
    ``CURR 0.2`` is ``SOUR2:CURR 0.2``. The gateway dropped the suffix from the path, so it
    judged, showed and sent ``SOUR1:CURR 0.2``: CH1's limit moved, and CH2 (the DUT the
    script meant to protect with 0.2 A) kept its 1 A. Through the socket door, every
    approval granted: CH2 gets both, CH1 nothing."""
    for command in ("SOUR1:CURR 1", "SOUR2:CURR 1"):
        dp832_port.write(command)
    before = _levels(dp832_port, 1)
    client = open_client("dp832", timeout=20000)
    seen = {r.id for r in gateway.store.list_requests(limit=1000)}
    task = asyncio.ensure_future(in_thread(client.query, f"{message};*OPC?"))
    req = await _pending(gateway, seen)
    await _grant_all(gateway, req, olga, pete)
    assert (await task).strip() == "1"
    assert gateway.get_request(req.id).status.value == "executed"
    assert _levels(dp832_port, 2) == (Decimal(5), Decimal("0.2"))
    assert _levels(dp832_port, 1) == before
    shown = [(a.canonical, a.channel) for a in req.actions if a.effect == "setpoint"]
    assert {channel for _, channel in shown} == {2}, shown


# ------------------------------------------------------------------ 2. a selection and a restart
async def _restarted(config: BenchConfig, db: Path, clock: Clock) -> Gateway:
    gw = Gateway(config, SqliteStore(db), clock=clock)
    await gw.start()
    return gw


@pytest.mark.parametrize(("instrument", "select", "write", "read"), [
    ("psu", "INST:NSEL 2", "VOLT 2.5", "VOLT? (@{ch})"),
    ("psu", "INST CH2", "VOLT 2.5", "VOLT? (@{ch})"),
    ("dp832", ":INST CH2", ":VOLT 2.5", "SOUR{ch}:VOLT?"),
])
async def test_a_runs_selection_survives_a_restart(
        config: BenchConfig, db_path: Path, clock: Clock, script: Principal, olga: Principal,
        pete: Principal, sim: SimBenchThread, dp832_port: Any, instrument: str, select: str,
        write: str, read: str) -> None:
    """Invariant 6, a crash loses nothing: a run selects CH2 (per run, never sent), the
    gateway restarts, and the same run's ``VOLT 2.5`` must still mean CH2. It meant the
    instrument's own selection (the E36312A's INST:NSEL?, CH1) or the profile's default
    (the DP832's CH1): under a plan for both channels it ran unattended on CH1."""
    gateway = await _restarted(config, db_path, clock)
    run = gateway.create_run(script, "script", goal="bias the DUT on CH2")
    picked = await gateway.submit(run.id, instrument, select)
    assert picked.status == "executed", picked
    await gateway.close()
    gateway.store.close()
    gateway = await _restarted(config, db_path, clock)
    rm = pyvisa.ResourceManager("@py")
    port: Any = dp832_port if instrument == "dp832" else rm.open_resource(
        sim.psu_resource_name, read_termination="\n", write_termination="\n", timeout=4000)
    try:
        before = Decimal(port.query(read.format(ch=1)))
        result = await gateway.submit(run.id, instrument, write)
        assert result.request is not None, result
        await _grant_all(gateway, result.request, olga, pete)
        assert gateway.get_request(result.request.id).status.value == "executed"
        assert Decimal(port.query(read.format(ch=2))) == Decimal("2.5")
        assert Decimal(port.query(read.format(ch=1))) == before
    finally:
        if port is not dp832_port:
            port.close()
        await gateway.close()
        gateway.store.close()


# ------------------------------------------------------------------ 3. MIN and MAX
@pytest.mark.parametrize(("message", "volts"), [
    ("INST N25V;:VOLT MIN", Decimal(0)),
    ("INST:NSEL 3;:VOLTage:LEVel MINimum", Decimal(0)),
    ("APPL N25V,MIN,0.1", Decimal(0)),
    ("APPL N25V,DEF,0.1", Decimal(0)),
    ("INST N25V;:VOLT MAX", Decimal("-25.75")),
    ("APPL P25V,MIN,0.1", Decimal(0)),
])
async def test_min_and_max_mean_what_the_manual_says(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        e3631a_sim: SimServedThread, message: str, volts: Decimal) -> None:
    """E3631A User's Guide, Table 4-1: the -25V output programs 0 to -25.75 V; its MIN value
    is 0 V and its MAX value -25.75 V. The gateway took MIN as the range's lower end, so a
    script parking N25V with ``VOLT MIN`` got ``VOLT -25.75`` sent (approved as shown, or
    under a plan): the opposite of what it asked. Every approval granted; the simulator's
    own port shows the level (and the simulator answers ``VOLT? MIN`` as the manual)."""
    rm = pyvisa.ResourceManager("@py")
    port: Any = rm.open_resource(e3631a_sim.resource_name, read_termination="\n",
                                 write_termination="\n", timeout=4000)
    try:
        for command in ("APPL N25V,-3,0.2", "APPL P25V,3,0.2"):
            port.write(command)
        run = gateway.create_run(script, "script", goal="park the outputs")
        result = await gateway.submit(run.id, "e3631a", message)
        assert result.request is not None, result
        await _grant_all(gateway, result.request, olga, pete)
        assert gateway.get_request(result.request.id).status.value == "executed"
        channel = 2 if "P25V" in message else 3
        assert Decimal(port.query(f"INST:NSEL {channel};:VOLT?")) == volts
        assert Decimal(port.query("INST:NSEL 3;:VOLT? MIN")) == 0
        assert Decimal(port.query("INST:NSEL 3;:VOLT? MAX")) == Decimal("-25.75")
    finally:
        port.close()


# ------------------------------------------------------------------ 4. *CLS inside a held write
@pytest.mark.parametrize("message", ["*CLS;VOLT 2,(@1)", "VOLT 2,(@1);*cls",
                                     "OUTP:STAT? (@1);*CLS;:VOLT 2,(@1)"])
async def test_cls_in_a_held_write_never_reaches_the_instrument(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any, message: str) -> None:
    """``*CLS`` clears the status every client of the instrument shares (IEEE 488.2 §10.3:
    the event registers, the error queue), so the gateway answers it itself and never sends
    it (docs/scpi.md). The read path skipped it; the executor did not: in a held message
    (``*CLS;VOLT 2,(@1)``, approved for its setpoint) it was written to the instrument, and
    the operation-complete bit another client's ``*OPC`` had set in the standard event
    status register was gone."""
    front_panel.write("*OPC")  # another client waits for its operation-complete bit
    run = gateway.create_run(script, "script", goal="a clean start")
    result = await gateway.submit(run.id, "psu", message)
    assert result.request is not None, result
    await _grant_all(gateway, result.request, olga, pete)
    assert gateway.get_request(result.request.id).status.value == "executed"
    assert Decimal(front_panel.query("VOLT? (@1)")) == 2
    assert int(front_panel.query("*ESR?")) & 1, "the other client's *OPC bit was cleared"


# ------------------------------------------------------------------ 5. a unit without its channel
@pytest.mark.parametrize("message", ["CURR:PROT:STAT 0", "SOURce:CURRent:PROTection:STATe OFF"])
async def test_a_unit_without_a_channel_runs_on_the_channel_the_approver_saw(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        front_panel: Any, message: str) -> None:
    """E36300 guide: without a channel list a command acts on the selected channel
    (INSTrument:NSELect). With no selection on the run, the gateway asked the instrument's
    selection only for a unit with a field (``VOLT 5``); ``CURR:PROT:STAT 0`` (over-current
    protection off) was held as a protection change on no channel and sent bare. The panel
    had CH2 selected when it was held and CH1 when it ran: CH1's protection went off, which
    nobody was shown. Now the run's channel is asked for at once, shown and written out."""
    for command in ("CURR:PROT:STAT 1,(@1)", "CURR:PROT:STAT 1,(@2)", "INST:NSEL 2"):
        front_panel.write(command)
    # Taken before the gateway asks on its own connection (the panel's writes and the
    # gateway's queries reach the simulator on two sockets, in no fixed order).
    assert front_panel.query("INST:NSEL?").strip() == "2"
    run = gateway.create_run(script, "script", goal="no trips during the ramp")
    result = await gateway.submit(run.id, "psu", message)
    assert result.request is not None, result
    shown = [(a.canonical, a.channel) for a in result.request.actions]
    front_panel.write("INST:NSEL 1")  # the person at the bench looks at CH1 meanwhile
    assert front_panel.query("INST:NSEL?").strip() == "1"
    await _grant_all(gateway, result.request, olga, pete)
    assert gateway.get_request(result.request.id).status.value == "executed"
    assert front_panel.query("CURR:PROT:STAT? (@1)").strip() == "1", shown
    assert front_panel.query("CURR:PROT:STAT? (@2)").strip() == "0", shown
    assert shown == [("CURR:PROT:STAT 0,(@2)", 2)], shown


# ------------------------------------------------------------------ 6. *RST and the selection
@pytest.mark.parametrize("messages", [["INST P25V", "*RST", "VOLT 3"],
                                      ["INST:NSEL 2", "*RST;:VOLT 3"],
                                      ["INST P25V;*RST;:VOLT 3"]])
async def test_a_reset_selects_what_the_manual_says(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        e3631a_sim: SimServedThread, messages: list[str]) -> None:
    """E3631A User's Guide, chapter 4, *RST: the power-on state, with the +6V output
    selected (INST:SEL P6V). A script that selected P25V, reset the supply and then set
    ``VOLT 3`` for the +6V rail had P25V set to 3 V: the run's selection (per run, never
    sent) outlived the reset. Every approval granted; the simulator's own port shows which
    output moved."""
    run = gateway.create_run(script, "script", goal="reset, then the logic rail")
    for message in messages:
        result = await gateway.submit(run.id, "e3631a", message)
        if result.request is not None:
            await _grant_all(gateway, result.request, olga, pete)
            done = gateway.get_request(result.request.id)
            assert done.status.value == "executed", (message, done.outcome)
        else:
            assert result.status == "executed", (message, result)
    rm = pyvisa.ResourceManager("@py")
    port: Any = rm.open_resource(e3631a_sim.resource_name, read_termination="\n",
                                 write_termination="\n", timeout=4000)
    try:
        assert Decimal(port.query("INST:NSEL 1;:VOLT?")) == 3
        assert Decimal(port.query("INST:NSEL 2;:VOLT?")) == 0
    finally:
        port.close()


# ------------------------------------------------------------------ 7. APPLy selects its output
@pytest.mark.parametrize(("instrument", "messages"), [
    ("e3631a", ["APPL P25V,5,0.1", "VOLT 3"]),
    ("e3631a", ["APPL P25V,5,0.1;:VOLT 3"]),
    ("e3631a", ["APPL P25V", "VOLT 3"]),
    ("dp832", [":APPL CH2,5,1", ":VOLT 3"]),
    ("dp832", [":APPL CH2", ":VOLT 3"]),
])
async def test_apply_selects_its_output_as_the_manual_says(
        gateway: Gateway, script: Principal, olga: Principal, pete: Principal,
        e3631a_sim: SimServedThread, dp832_port: Any, instrument: str,
        messages: list[str]) -> None:
    """E3631A User's Guide, "Using the APPLy command": APPLy "is combination of
    INSTrument:SELect, [SOURce:]VOLTage, and [SOURce:]CURRent commands", and with no value
    "only selects the output specified and acts as the INSTrument command"; the DP800 guide's
    :APPLy likewise "select[s] the specified channel as the current channel". After
    ``APPL P25V,5,0.1`` the gateway kept the run on the first output, so ``VOLT 3`` (meant for
    P25V) set P6V; ``APPL P25V`` alone was refused (-109). Every approval granted; the
    simulator's own port shows the second output at 3 V and the first untouched."""
    run = gateway.create_run(script, "script", goal="the analog rail")
    for message in messages:
        result = await gateway.submit(run.id, instrument, message)
        if result.request is not None:
            await _grant_all(gateway, result.request, olga, pete)
            done = gateway.get_request(result.request.id)
            assert done.status.value == "executed", (message, done.outcome)
        else:
            assert result.status == "executed", (message, result)
    if instrument == "dp832":
        assert Decimal(dp832_port.query("SOUR2:VOLT?")) == 3
        assert Decimal(dp832_port.query("SOUR1:VOLT?")) == 0
        return
    rm = pyvisa.ResourceManager("@py")
    port: Any = rm.open_resource(e3631a_sim.resource_name, read_termination="\n",
                                 write_termination="\n", timeout=4000)
    try:
        assert Decimal(port.query("INST:NSEL 2;:VOLT?")) == 3
        assert Decimal(port.query("INST:NSEL 1;:VOLT?")) == 0
    finally:
        port.close()
