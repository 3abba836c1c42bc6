"""An instrument that restarts at every step: it answers, drops the connection and comes
back in another state. Whatever the gateway judges (the envelope watch's look, a read-back,
a meter's function before a reading, a selection before its unit, the stop's read-back)
stands only for the connection it was read on: half a state read before a restart and half
after is no state. Every check of the instrument is made on the simulator's own port, on
asyncio's loop and on the one ``bench-gate serve`` runs (uvloop)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop

from bench_gate.config import BenchConfig, ChannelLimits, default_config
from bench_gate.errors import InstrumentError
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import Clock, own_port, served_bench
from tests.liar_instrument import LyingInstrument, liar, lied_config

__all__ = ["liar", "lied_config"]  # the fixtures, for pytest

T = TypeVar("T")


#: The loops a scenario runs on: ``bench-gate serve``'s (uvloop), where an answer and the
#: hang-up behind it are read in one go, and asyncio's own.
LOOPS = {"uvloop": uvloop.new_event_loop, "asyncio": asyncio.new_event_loop}


@pytest.fixture(params=sorted(LOOPS))
def loop(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def on_loop(loop: str, cfg: BenchConfig, db_path: Path, clock: Clock, io: str,
            scenario: Callable[[Gateway], Awaitable[T]], which: int = -1) -> T:
    """``scenario`` on a started gateway (instrument ``which``'s link ``io``), on ``loop``."""
    async def run() -> T:
        cfg.instruments[which].io = io  # type: ignore[assignment]
        g = Gateway(cfg, SqliteStore(db_path), clock=clock)
        await g.start()
        try:
            return await scenario(g)
        finally:
            await g.close()
            g.store.close()

    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        return runner.run(run())


def panel(front_panel: Any, query: str) -> Decimal:
    return Decimal(str(front_panel.query(query)).strip())


class Busy:
    """The lane's link, as the gateway's loop busy with other work finds it: once the liar
    hung up behind an answer (``hung_up``), or behind the command ``on`` (waited for), the
    hang-up is seen before the next command (waited for, bounded), and ``then`` puts the
    instrument in the state it came back in."""

    def __init__(self, inner: Any, hung_up: Callable[[], bool], on: str | None = None,
                 then: Callable[[], object] | None = None) -> None:
        self.inner = inner
        self.hung_up = hung_up
        self.on = on
        self.then = then
        self.waited = False

    @property
    def opens(self) -> int:
        return int(self.inner.opens)

    @property
    def connected(self) -> bool:
        return bool(self.inner.connected)

    @property
    def pinned(self) -> int | None:
        return self.inner.pinned  # type: ignore[no-any-return]

    @pinned.setter
    def pinned(self, value: int | None) -> None:
        self.inner.pinned = value

    async def write(self, command: str) -> None:
        await self.inner.write(command)
        await self._seen(command)

    async def query(self, command: str, extra_seconds: float = 0.0) -> str:
        answer = str(await self.inner.query(command, extra_seconds))
        await self._seen(command)
        return answer

    async def _seen(self, command: str) -> None:
        if self.waited or (self.on is not None and command != self.on):
            return
        for _ in range(400 if self.on is not None else 0):  # bounded: 2 s at most
            if self.hung_up():
                break
            await asyncio.sleep(0.005)
        if not self.hung_up():
            return
        self.waited = True
        for _ in range(400):  # bounded: 2 s at most
            if not self.inner.connected:
                break
            await asyncio.sleep(0.005)
        if self.then is not None:
            self.then()

    async def close(self) -> None:
        await self.inner.close()


@pytest.mark.parametrize("io", ["auto", "pyvisa"])
def test_the_watch_never_judges_half_a_state_read_before_a_restart(
        lied_config: BenchConfig, db_path: Path, clock: Clock, liar: LyingInstrument,
        front_panel: Any, io: str, loop: str) -> None:
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

    safed = on_loop(loop, lied_config, db_path, clock, io, scenario, 0)
    assert panel(front_panel, "VOLT? (@2)") == 20  # the state it restarted into
    assert panel(front_panel, "OUTP? (@2)") == 0, safed  # never left on outside
    assert safed is not None and safed.sent[-1] == "OUTP 0,(@2)", safed
    assert (2, "voltage", "20.0") in {(b.channel, b.field, b.value) for b in safed.found}


@pytest.mark.parametrize("io", ["auto", "pyvisa"])
def test_a_stop_is_not_reported_safe_from_half_a_read_back(
        lied_config: BenchConfig, db_path: Path, clock: Clock, liar: LyingInstrument,
        olga: Principal, front_panel: Any, io: str, loop: str) -> None:
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

    done = on_loop(loop, lied_config, db_path, clock, io, scenario, 0)
    assert int(panel(front_panel, "OUTP? (@1)")) == 0, done  # made safe after all
    assert done["read_back"] == {"ch1.output": "0", "ch2.output": "0", "ch3.output": "0"}
    assert done["sent"].count("OUTP 0,(@1)") == 2, done  # once more after the restart


@pytest.fixture
def dp832() -> Iterator[SimServedThread]:
    """A supply whose state is read one field at a time (no compound queries)."""
    with SimServedThread("dp832") as served:
        yield served


def test_a_read_back_is_one_state_never_half_before_a_restart(
        sim: SimBenchThread, dp832: SimServedThread, db_path: Path, clock: Clock,
        script: Principal, olga: Principal, loop: str) -> None:
    """A DP832 (each field asked alone) with CH2 on at 1 V; ``SOUR2:VOLT 5`` approved and
    written. Its read-back read CH2's voltage (5 V), then the supply answered CH2's current
    and restarted at 20 V (6 V envelope): the rest was read on a new connection, the write
    was "executed", and CH2 stayed on at 20 V. Now the read-back is one connection's: lost
    midway, it is no read-back (ambiguous), and the look that follows, on one new
    connection, finds 20 V and switches CH2 off. (The gateway's loop busy elsewhere sees
    the hang-up before it asks the next field; otherwise that field fails on the old one.)"""
    liar = LyingInstrument(dp832.port)
    cfg = served_bench(sim, "dp832", dp832, "dp832", {
        2: ChannelLimits(voltage=Decimal(6), current=Decimal("0.5"))})
    cfg.instruments[-1].resource = liar.resource
    cfg.instruments[-1].timeout_ms = 1000
    cfg.policy.watch_seconds = 0  # nothing but the write's own turn looks at it
    with own_port(dp832.resource_name, panel=True) as panel:
        for text in ("SOUR2:CURR 0.2", "SOUR2:VOLT 1", "OUTP CH2,ON"):
            panel.write(text)

        async def scenario(g: Gateway) -> tuple[Status, str]:
            run = g.create_run(script, "script")
            req = (await g.submit(run.id, "dp832", "SOUR2:VOLT 5")).request
            assert req is not None
            lane = g.instrument("dp832").lane
            lane.link = Busy(lane.link,  # type: ignore[assignment]
                             lambda: ("hang_up", "SOUR2:CURR?") in liar.fired)
            liar.hang_up("SOUR2:CURR?", sends="SOUR2:VOLT 20", after="SOUR2:VOLT 5.0")
            done = await g.grant(req.id, olga, [k.value for k in req.missing()],
                                 proposal_hash=req.proposal_hash)
            assert ("hang_up", "SOUR2:CURR?") in liar.fired  # where it was meant
            return done.request.status, done.request.outcome or ""

        try:
            status, outcome = on_loop(loop, cfg, db_path, clock, "auto", scenario)
        finally:
            liar.close()
        assert Decimal(panel.query("SOUR2:VOLT?")) == 20  # the state it restarted into
        assert panel.query("OUTP? CH2").strip() == "OFF", outcome  # made safe at once
    assert status is Status.AMBIGUOUS, outcome


def test_a_reading_never_goes_out_on_a_connection_opened_after_its_function_was_asked(
        sim: SimBenchThread, db_path: Path, clock: Clock, script: Principal,
        loop: str) -> None:
    """``READ?`` passes at once while the meter measures DC volts, asked (``FUNC?``) on the
    reading's own lane turn. The meter answered, restarted measuring resistance (a test
    current into the DUT), and the socket link sent ``READ?`` on a new connection, judged on
    the function of the old one. Now it is refused unsent; the next reading asks again."""
    liar = LyingInstrument(sim.dmm_port)
    cfg = default_config(sim.psu_port, liar.port)
    cfg.instruments[1].timeout_ms = 1000
    cfg.policy.watch_seconds = 0
    with own_port(f"TCPIP0::127.0.0.1::{sim.dmm_port}::SOCKET", panel=True) as meter:
        meter.write("CONF:VOLT:DC")

        async def scenario(g: Gateway) -> tuple[str, str]:
            run = g.create_run(script, "script")
            lane = g.instrument("dmm").lane
            await g.submit(run.id, "dmm", "*IDN?")  # its connection, asked who answers
            lane.link = Busy(lane.link,  # type: ignore[assignment]
                             lambda: ("hang_up", "FUNC?") in liar.fired,
                             then=lambda: meter.write("CONF:RES"))
            liar.hang_up("FUNC?")
            start = len(liar.received)
            with pytest.raises(InstrumentError, match="lost midway"):
                await g.submit(run.id, "dmm", "READ?")
            assert ("hang_up", "FUNC?") in liar.fired  # the restart came where it was meant
            after = liar.received[start:]
            again = await g.submit(run.id, "dmm", "READ?")  # asked again: it excites
            return ",".join(after), again.status

        try:
            sent, again = on_loop(loop, cfg, db_path, clock, "auto", scenario, 1)
        finally:
            liar.close()
    assert "READ?" not in sent.split(","), sent  # never measured with a test current
    assert again == "pending", again  # held: the function asked now excites


@pytest.fixture
def e3631a() -> Iterator[SimServedThread]:
    """A supply that addresses its outputs by selection (``INST:NSEL``)."""
    with SimServedThread("e3631a") as served:
        yield served


def test_a_selection_and_the_unit_after_it_go_on_one_connection(
        sim: SimBenchThread, e3631a: SimServedThread, db_path: Path, clock: Clock,
        script: Principal, loop: str) -> None:
    """``VOLT? (@2)`` reaches an E3631A as ``INST:NSEL 2`` then ``VOLT?``. The supply took
    the selection and restarted: ``VOLT?`` went out on a new connection, where the
    selection is the power-on one (output 1), and output 1's 1 V came back as output 2's.
    Now the query is refused unsent; the next one selects again."""
    liar = LyingInstrument(e3631a.port)
    cfg = served_bench(sim, "e3631a", e3631a, "e3631a")
    cfg.instruments[-1].resource = liar.resource
    cfg.instruments[-1].timeout_ms = 1000
    cfg.policy.watch_seconds = 0
    with own_port(e3631a.resource_name, panel=True) as panel:
        for text in ("INST:NSEL 1", "VOLT 1", "INST:NSEL 2", "VOLT 10", "INST:NSEL 1"):
            panel.write(text)

        async def scenario(g: Gateway) -> tuple[str, str]:
            run = g.create_run(script, "script")
            lane = g.instrument("e3631a").lane
            await g.submit(run.id, "e3631a", "*IDN?")  # its connection, asked who answers
            lane.link = Busy(lane.link,  # type: ignore[assignment]
                             lambda: ("drop", "INST:NSEL 2") in liar.fired, "INST:NSEL 2",
                             then=lambda: panel.write("INST:NSEL 1"))  # its power-on one
            liar.drop("INST:NSEL 2", landed=True)
            answer = ""
            with contextlib.suppress(InstrumentError):
                answer = (await g.submit(run.id, "e3631a", "VOLT? (@2)")).response or ""
            assert ("drop", "INST:NSEL 2") in liar.fired  # the restart came where meant
            again = (await g.submit(run.id, "e3631a", "VOLT? (@2)")).response or ""
            return answer, again

        try:
            answer, again = on_loop(loop, cfg, db_path, clock, "auto", scenario)
        finally:
            liar.close()
    assert answer == "", answer  # never output 1's voltage as output 2's
    assert Decimal(again) == 10
