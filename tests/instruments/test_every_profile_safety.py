"""The safety promises on every shipped profile with a safe action, not only the default
supply: the E36312A (the default bench's ``psu``), the DP832, the SPD3303X, the E3631A, the
Keithley 2450 and the DL3021, each on its own simulator. Every check of the instrument reads
the simulator's own port, never the gateway.

1. an over-limit state set at the panel with the output on is switched off by the watch
   and journaled;
2. a write whose read-back finds an energized channel outside is made safe at once, before
   the request's outcome is recorded (watch off, so only the read-back can do it);
3. the emergency stop switches every output off and refuses writes (-203) under another
   name of the same instrument, its resource spelled another way;
4. energizing needs the setpoint and the output enable, in each of the profile's spellings
   of the output command; with one of them nothing is energized and the answer names the
   one missing;
5. a recall of an over-limit state saved at the panel is refused before it is sent, in
   each spelling of the recall.

(The 34465A and DMM6500 have no output: their safe action, a passive function, is in
tests/core/test_meter_stop.py and tests/instruments/test_dmm6500_stop.py; generic has none.)
"""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bench_gate.config import BenchConfig, ChannelLimits, InstrumentConfig, default_config
from bench_gate.errors import Refused
from bench_gate.gateway import Gateway
from bench_gate.models import ApprovalKind, EventType, Principal, Status
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import own_port
from tests.waits import until

L = ChannelLimits


def _spd_on(port: Any) -> list[bool]:
    word = int(port.query("SYST:STAT?"), 16)
    return [bool(word >> 4 & 1), bool(word >> 5 & 1)]


@dataclass(frozen=True)
class Case:
    profile: str
    #: The EXTRA simulator playing it; None: the default bench's supply.
    served: str | None
    limits: dict[int, ChannelLimits]
    #: At the panel: CH1 outside the envelope, output on.
    over: list[str]
    #: Every output's state, read on the simulator's own port.
    outputs: Callable[[Any], list[bool]]
    #: At the panel: CH1 at levels inside the envelope, output off.
    inside: list[str]
    #: Messages that energize CH1 (inside levels) with a setpoint and the output on.
    energize: list[str]
    #: A write inside the envelope on another channel (None: one channel only).
    unrelated: str | None = None
    #: Spellings of a recall of slot 1.
    recalls: list[str] = field(default_factory=lambda: ["*RCL 1", "*rcl 1", "*RCL +1"])


CASES = [
    Case("e36312a", None,
         {1: L(voltage=Decimal(6), current=Decimal(1)),
          2: L(voltage=Decimal(12), current=Decimal("0.5")),
          3: L(voltage=Decimal(12), current=Decimal("0.5"))},
         ["VOLT 1,(@1)", "CURR 2,(@1)", "OUTP 1,(@1)"],
         lambda p: [p.query(f"OUTP? (@{ch})") == "1" for ch in (1, 2, 3)],
         ["OUTP 0,(@1)", "VOLT 1,(@1)", "CURR 0.2,(@1)"],
         ["VOLT 2,(@1);:OUTP ON,(@1)", "APPL CH1,2,0.2;:OUTP:STAT 1,(@1)",
          "SOUR:VOLT 2,(@1);:OUTPUT:STATE ON,(@1)"], "VOLT 1,(@2)",
         ["*RCL 1", "*rcl 1", "*RCL +1", "MMEM:LOAD:STAT \"1.sta\""]),
    Case("dp832", "dp832",
         {1: L(voltage=Decimal(12), current=Decimal(1)),
          2: L(voltage=Decimal(6), current=Decimal("0.5")),
          3: L(voltage=Decimal("3.3"), current=Decimal("0.5"))},
         ["SOUR1:CURR 0.2", "SOUR1:VOLT 20", "OUTP CH1,ON"],
         lambda p: [p.query(f"OUTP? CH{ch}") == "ON" for ch in (1, 2, 3)],
         ["OUTP CH1,OFF", "SOUR1:VOLT 1", "SOUR1:CURR 0.2"],
         ["SOUR1:VOLT 2;:OUTP CH1,ON", "APPL CH1,2,0.2;:OUTP:STAT CH1,ON",
          ":SOUR1:VOLT 2;:OUTP:STAT CH1,1", "INST:NSEL 1;:VOLT 2;:OUTP ON"], "SOUR2:VOLT 1"),
    Case("spd3303x", "spd3303x",
         {1: L(voltage=Decimal(12), current=Decimal(1)),
          2: L(voltage=Decimal(6), current=Decimal("0.5")),
          3: L(voltage=Decimal("3.3"), current=Decimal("0.5"))},
         ["CH1:CURR 0.2", "CH1:VOLT 20", "OUTP CH1,ON"],
         _spd_on,
         ["OUTP CH1,OFF", "CH1:VOLT 1", "CH1:CURR 0.2"],
         ["CH1:VOLT 2;:OUTP CH1,ON", "CH1:VOLTAGE 2;:OUTPUT CH1,ON",
          "INST CH1;:VOLT 2;:OUTP CH1,ON"], "CH2:VOLT 1"),
    Case("e3631a", "e3631a",
         {1: L(voltage=Decimal(6), current=Decimal(1)),
          2: L(voltage=Decimal(12), current=Decimal("0.5")),
          3: L(voltage=Decimal(12), current=Decimal("0.5"))},
         ["INST:NSEL 1", "CURR 0.2", "VOLT 6.1", "INST:NSEL 2", "CURR 0.1", "VOLT 20",
          "OUTP ON"],
         lambda p: [p.query("OUTP?") == "1"],
         ["OUTP OFF", "INST:NSEL 1", "VOLT 1", "CURR 0.2", "INST:NSEL 2", "VOLT 1",
          "CURR 0.1", "INST:NSEL 3", "VOLT -1", "CURR 0.1"],
         ["INST:NSEL 1;:VOLT 2;:OUTP ON", "APPL P6V,2,0.2;:OUTP:STAT ON",
          "INST P6V;:VOLT 2;:OUTP 1"], "APPL N25V,-1,0.1"),
    Case("k2450", "smu", {1: L(voltage=Decimal(10), current=Decimal("0.1"))},
         [":SOUR:VOLT:ILIM 0.05", ":SOUR:VOLT 20", ":OUTP ON"],
         lambda p: [p.query(":OUTP?") == "1"],
         [":OUTP OFF", ":SOUR:VOLT 1", ":SOUR:VOLT:ILIM 0.05", ":SOUR:CURR:VLIM 5"],
         [":SOUR:VOLT 2;:OUTP ON", "SOUR1:VOLT 2;:OUTP1:STAT 1", ":SOUR:VOLT:LEV 2;:OUTP:STAT ON"],
         recalls=["*RCL 1", "*rcl 1", "*RCL +1"]),
    Case("dl3021", "dl3021", {1: L(voltage=Decimal(20), current=Decimal(10))},
         ["CURR 15", "INP ON"],
         lambda p: [p.query("INP?") == "1"],
         ["INP OFF", "CURR 1"],
         ["CURR 2;:INP ON", ":SOUR:CURR 2;:SOUR:INP:STAT ON", "CURR 2;:INP:STAT 1"]),
]
IDS = [c.profile for c in CASES]


@dataclass
class Bench:
    case: Case
    resource: str
    config: BenchConfig

    @property
    def name(self) -> str:
        return self.case.profile


@pytest.fixture(params=CASES, ids=IDS)
def bench(request: pytest.FixtureRequest, sim: SimBenchThread) -> Iterator[Bench]:
    case: Case = request.param
    cfg = default_config(sim.psu_port, sim.dmm_port)
    if case.served is None:
        cfg.instruments = [ic for ic in cfg.instruments if ic.name == "psu"]
        cfg.instruments[0].name = case.profile
        cfg.envelope = {case.profile: dict(case.limits)}
        yield Bench(case, sim.psu_resource_name, cfg)
        return
    with SimServedThread(case.served) as served:
        cfg.instruments.append(InstrumentConfig(name=case.profile, resource=served.resource_name,
                                                profile=case.profile))
        cfg.envelope[case.profile] = dict(case.limits)
        yield Bench(case, served.resource_name, cfg)


@pytest.fixture
def port(bench: Bench) -> Iterator[Any]:
    with own_port(bench.resource, panel=True) as res:
        yield res


def at_panel(port: Any, commands: list[str]) -> None:
    for command in commands:
        port.write(command)
    assert port.query("*IDN?").strip()  # taken before the gateway reads next


async def started(cfg: BenchConfig, db: Path) -> Gateway:
    gw = Gateway(cfg, SqliteStore(db))
    await gw.start()
    return gw


@pytest.fixture
async def gw(bench: Bench, tmp_path: Path) -> AsyncIterator[Gateway]:
    gw = await started(bench.config, tmp_path / "bench.db")
    yield gw
    await gw.close()
    gw.store.close()


@pytest.fixture
async def quiet_gw(bench: Bench, tmp_path: Path) -> AsyncIterator[Gateway]:
    """No watch: only a read-back can find a breach."""
    bench.config.policy.watch_seconds = 0
    gw = await started(bench.config, tmp_path / "bench.db")
    yield gw
    await gw.close()
    gw.store.close()



def breaches(gw: Gateway, stream: str) -> list[dict[str, Any]]:
    return [e.data for e in gw.journal(stream, limit=1000)
            if e.type is EventType.ENVELOPE_BREACH]


async def test_1_a_breach_set_at_the_panel_is_switched_off_by_the_watch(
        bench: Bench, gw: Gateway, port: Any) -> None:
    at_panel(port, bench.case.over)
    assert bench.case.outputs(port)[0], "the panel could not switch it on"
    # within the watch's period (1 s), and a few for a loaded machine
    assert await until(lambda: not any(bench.case.outputs(port)), 8.0)
    assert await until(lambda: bool(breaches(gw, f"bench:{gw.bench}")))
    found = breaches(gw, f"bench:{gw.bench}")
    assert found[0]["found_by"] == "watch" and found[0]["instrument"] == bench.name
    assert any(b["channel"] == 1 for b in found[0]["breaches"]), found


async def test_2_a_breach_found_by_a_write_read_back_is_made_safe_at_once(
        bench: Bench, quiet_gw: Gateway, port: Any, script: Principal,
        olga: Principal) -> None:
    if bench.case.unrelated is None:
        pytest.skip("one channel: any write names it, and is judged before it is sent")
    at_panel(port, bench.case.over)
    run = quiet_gw.create_run(script, "script")
    sent = await quiet_gw.submit(run.id, bench.name, bench.case.unrelated)
    if sent.request is not None:
        done = await quiet_gw.grant(sent.request.id, olga, list(sent.request.required),
                                    proposal_hash=sent.request.proposal_hash)
        outcome = done.request.outcome or ""
        assert "breach" in outcome, outcome
    else:
        outcome = sent.reason
    assert not any(bench.case.outputs(port)), outcome
    assert breaches(quiet_gw, run.id) or breaches(quiet_gw, f"bench:{quiet_gw.bench}"), outcome


#: Other spellings of one resource: the board, the address as one number, in hex, in
#: short form (as inet_aton reads it, and so the socket), localhost, case, the port padded.
def _resolves(host: str) -> str | None:
    with contextlib.suppress(OSError):
        return socket.gethostbyname(host)
    return None


SPELLINGS: dict[str, Callable[[str], str]] = {
    "board": lambda r: r.replace("TCPIP0::", "TCPIP::"),
    "one-number": lambda r: r.replace("127.0.0.1", "2130706433"),
    "hex": lambda r: r.replace("127.0.0.1", "0x7f000001"),
    "short": lambda r: r.replace("127.0.0.1", "127.1"),
    "octal": lambda r: r.replace("127.0.0.1", "0177.0.0.01"),
    "localhost": lambda r: r.replace("127.0.0.1", "LocalHost"),
    "case": lambda r: r.lower(),
    "padded-port": lambda r: re.sub(r"::(\d+)::SOCKET", r"::00\1::SOCKET", r),
    # A name of this host that resolves to 127.0.0.1: no spelling rule can tell, only
    # the instrument's *IDN? answer, read for the snapshot the request is held on.
    "host-alias": lambda r: r.replace("127.0.0.1", socket.gethostname()),
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
async def test_3_the_stop_holds_under_every_spelling_of_the_resource(
        bench: Bench, tmp_path: Path, port: Any, script: Principal, olga: Principal,
        spelling: str) -> None:
    """The instrument is on the bench twice: its name, and ``other`` with its resource
    spelled another way. STOP on the first: a write to either is refused at once (-203),
    never held for a person to approve, and nothing is energized."""
    if spelling == "host-alias" and _resolves(socket.gethostname()) != "127.0.0.1":
        pytest.skip(f"this host's name {socket.gethostname()!r} is not 127.0.0.1")
    bench.config.instruments.append(InstrumentConfig(
        name="other", resource=SPELLINGS[spelling](bench.resource), profile=bench.name))
    bench.config.envelope["other"] = dict(bench.case.limits)
    gw = await started(bench.config, tmp_path / "bench.db")
    try:
        at_panel(port, bench.case.inside)
        at_panel(port, [bench.case.over[-1]])  # output on, inside
        await gw.emergency_stop(olga, "test", bench.name)
        assert not any(bench.case.outputs(port))
        run = gw.create_run(script, "script")
        for name in (bench.name, "other"):
            sent = await gw.submit(run.id, name, bench.case.energize[0])
            assert sent.status == "refused" and sent.code == -203, (name, sent)
            assert not any(bench.case.outputs(port)), name
    finally:
        await gw.close()
        gw.store.close()


@pytest.mark.parametrize("first", [ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE])
async def test_4_energizing_needs_both_approvals_in_every_spelling(
        bench: Bench, gw: Gateway, port: Any, script: Principal, olga: Principal,
        first: ApprovalKind) -> None:
    run = gw.create_run(script, "script")
    other = ({ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE} - {first}).pop()
    for message in bench.case.energize:
        at_panel(port, bench.case.inside)
        sent = await gw.submit(run.id, bench.name, message)
        assert sent.request is not None, (message, sent)
        req = sent.request
        assert {ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE} <= set(req.required), message
        part = await gw.grant(req.id, olga, [first.value], proposal_hash=req.proposal_hash)
        assert part.request.status is Status.PENDING, (message, part.request.outcome)
        assert other in part.missing, (message, part.missing)
        words = ("no approved setpoint for CH1" if other is ApprovalKind.SETPOINT
                 else "the output enable of CH1")
        assert words in part.message, (message, part.message)
        assert not any(bench.case.outputs(port)), message
        rest = [k.value for k in part.request.missing()]
        done = await gw.grant(req.id, olga, rest, proposal_hash=req.proposal_hash)
        assert done.request.status is Status.EXECUTED, (message, done.request.outcome)
        assert bench.case.outputs(port)[0], message


async def test_5_a_recall_of_an_over_limit_state_is_refused_before_it_is_sent(
        bench: Bench, quiet_gw: Gateway, port: Any, script: Principal) -> None:
    gw = quiet_gw
    at_panel(port, bench.case.over)
    save = [m.replace("RCL", "SAV").replace("rcl", "sav") for m in bench.case.recalls[:1]]
    at_panel(port, [*save, "*RST"])
    assert not any(bench.case.outputs(port))
    run = gw.create_run(script, "script")
    for spelling in bench.case.recalls:
        result = await gw.submit(run.id, bench.name, spelling)
        assert result.status == "refused" and result.code == -222, (spelling, result)
    assert gw.list_requests() == []
    assert not any(bench.case.outputs(port))


ALL_ON = {"e36312a": ["VOLT 1,(@1:3)", "CURR 0.1,(@1:3)", "OUTP 1,(@1:3)"],
          "dp832": [f"SOUR{ch}:VOLT 1;:SOUR{ch}:CURR 0.1;:OUTP CH{ch},ON" for ch in (1, 2, 3)],
          "spd3303x": ["CH1:VOLT 1", "CH2:VOLT 1", "OUTP CH1,ON", "OUTP CH2,ON"],
          "e3631a": ["OUTP ON"], "k2450": [":OUTP ON"], "dl3021": ["INP ON"]}


async def test_3b_the_stop_switches_every_output_off(
        bench: Bench, gw: Gateway, port: Any, olga: Principal) -> None:
    at_panel(port, bench.case.inside + ALL_ON[bench.name])
    assert all(bench.case.outputs(port)), bench.case.outputs(port)
    done = await gw.emergency_stop(olga, "test", bench.name)
    assert not any(bench.case.outputs(port)), done
    assert port.query("*IDN?")  # still answering


async def test_5b_a_recall_of_a_state_saved_through_the_gateway_over_the_limit_is_refused(
        bench: Bench, quiet_gw: Gateway, port: Any, script: Principal,
        olga: Principal) -> None:
    """CH1 on outside at the panel (no watch); ``*SAV 1`` through the gateway stores it
    (its read-back switches CH1 off). The gateway's record of slot 1 says what it holds:
    its recall is refused before it is sent, in every spelling."""
    gw = quiet_gw
    at_panel(port, bench.case.over)
    run = gw.create_run(script, "script")
    sent = await gw.submit(run.id, bench.name, "*SAV 1")
    if sent.request is None:  # the E3631A: its triggered levels, stored too, are outside
        assert sent.status == "refused" and sent.code == -222, sent
        return
    saved = await gw.grant(sent.request.id, olga, list(sent.request.required),
                           proposal_hash=sent.request.proposal_hash)
    assert saved.request.status in (Status.EXECUTED, Status.AMBIGUOUS), saved.request.outcome
    assert not any(bench.case.outputs(port)), "the save's read-back made it safe"
    at_panel(port, ["*RST"])
    for spelling in bench.case.recalls:
        if "RCL" not in spelling.upper():
            continue
        result = await gw.submit(run.id, bench.name, spelling)
        assert result.status == "refused" and result.code == -222, (spelling, result)
        assert "nothing was sent" in result.reason, result.reason
    assert not any(bench.case.outputs(port))


PLAN_SCOPE = {"channels": [1], "voltage": [0, 1], "current_max": 0.05, "max_step": 0.5,
              "output_enable": True, "max_writes": 10, "timeout_minutes": 30}


@pytest.mark.parametrize("name", ["self", "other"])
async def test_3c_no_standing_plan_is_asked_for_on_a_stopped_instrument(
        bench: Bench, tmp_path: Path, port: Any, script: Principal, olga: Principal,
        pete: Principal, name: str) -> None:
    """A stop ends every plan on the instrument, so that none switches an output back on
    unattended once the stop is cleared. A plan asked for after the stop was held, could
    be approved while stopped, and was active when the stop was cleared: the script then
    switched the output on with no click. It is refused at once (-203), under any name."""
    bench.config.instruments.append(InstrumentConfig(
        name="other", resource=SPELLINGS["one-number"](bench.resource), profile=bench.name))
    bench.config.envelope["other"] = dict(bench.case.limits)
    gw = await started(bench.config, tmp_path / "bench.db")
    try:
        await gw.emergency_stop(olga, "test", bench.name)
        target = bench.name if name == "self" else "other"
        run = gw.create_run(script, "script")
        with pytest.raises(Refused) as refused:
            await gw.request_plan(run.id, {"instrument": target, **PLAN_SCOPE})
        assert refused.value.code == -203 and "is stopped" in refused.value.message
        assert gw.list_plans(run.id) == [] and gw.list_requests() == []
        assert not any(bench.case.outputs(port))
    finally:
        await gw.close()
        gw.store.close()
