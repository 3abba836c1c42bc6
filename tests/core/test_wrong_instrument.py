"""A profile judges only the instrument it describes (bench_gate/identity.py).

bench.toml points the E36312A's profile at a DP832 (a wrong resource, a swapped cable): the
gateway would classify, render, predict and judge the envelope by the E36312A's rules on
another model. Every message is refused with both identities named, through the core and
the socket door; nothing but ``*IDN?`` reaches the DP832 (seen on a relay in front of it,
:class:`Cable`), and its state is unchanged on its own port. A cable moved to the DP832
while the gateway runs, on the same connection, is caught before the next write. A matching
instrument still works, and works again once the cable is put back."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from bench_gate.auth import Tokens
from bench_gate.config import BenchConfig, default_config
from bench_gate.errors import WrongInstrument
from bench_gate.gateway import Gateway
from bench_gate.identity import Identity, fits, identities
from bench_gate.models import EventType, Principal, Status
from bench_gate.proxy import start_doors
from bench_gate.scpi import get_profile
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import Clock, own_port

E36312A = "Keysight Technologies,E36312A"
DP832 = "RIGOL TECHNOLOGIES,DP832"


class Cable:
    """A relay on 127.0.0.1 in front of one simulated instrument's port, that the test can
    move to another instrument's port while the gateway's connection to it stays up (a
    LAN-to-GPIB adapter whose cable is moved). It keeps every message it passed on, by the
    port it went to."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sent: dict[int, list[str]] = {}
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self._closed = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def resource(self) -> str:
        return f"TCPIP0::127.0.0.1::{self._server.getsockname()[1]}::SOCKET"

    def move(self, port: int) -> None:
        self.port = port

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._relay, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _relay(self, conn: socket.socket) -> None:
        backend: tuple[int, socket.socket, Any] | None = None
        with conn, conn.makefile("rb") as lines:
            for line in lines:
                if backend is None or backend[0] != self.port:  # moved: the next instrument
                    if backend is not None:
                        backend[1].close()
                    out = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                    backend = (self.port, out, out.makefile("rb"))
                port, out, answers = backend
                text = line.decode("ascii", "replace").strip()
                self.sent.setdefault(port, []).append(text)
                out.sendall(line)
                if "?" in text:
                    try:
                        conn.sendall(answers.readline())
                    except (TimeoutError, OSError):  # unanswered (another model's header):
                        out.close()  # its reader is spent; the next line connects afresh
                        backend = None
        if backend is not None:
            backend[1].close()

    def __enter__(self) -> Cable:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._closed.set()
        self._server.close()


async def quiet(cable: Cable, port: int) -> None:
    """Until nothing went through ``cable`` to ``port`` for 0.3 s: between two of the
    watch's checks (each 1 s). A cable moved in the middle of a lane turn, between two of
    its queries, is a race no ``*IDN?`` can close (the next unanswered field asks again)."""
    seen = -1
    for _ in range(100):
        await asyncio.sleep(0.3)
        if len(cable.sent.get(port, [])) == seen:
            return
        seen = len(cable.sent.get(port, []))


@pytest.fixture
def dp832() -> Iterator[SimServedThread]:
    with SimServedThread("dp832") as served:
        yield served


def bench(sim: SimBenchThread, resource: str) -> BenchConfig:
    """The simulated bench with ``psu`` (the E36312A's profile) at ``resource``."""
    cfg = default_config(sim.psu_port, sim.dmm_port)
    cfg.instruments[0].resource = resource
    for ic in cfg.instruments:
        ic.socket_port = 0
    return cfg


def dp832_state(served: SimServedThread) -> tuple[str, str, str]:
    with own_port(served.resource_name) as res:
        return res.query("SOUR1:VOLT?"), res.query("SOUR1:CURR?"), res.query("OUTP? CH1")


def e36312a_volts(sim: SimBenchThread) -> Decimal:
    with own_port(sim.psu_resource_name) as res:
        return Decimal(res.query("VOLT? (@1)"))


def names_both(text: str) -> bool:
    return E36312A in text and DP832 in text


async def test_another_model_behind_a_profile_is_refused_everything_through_every_door(
        sim: SimBenchThread, dp832: SimServedThread, db_path: Path, clock: Clock,
        script: Principal) -> None:
    before = dp832_state(dp832)
    with Cable(dp832.port) as cable:
        cfg = bench(sim, cable.resource)
        gw = Gateway(cfg, SqliteStore(db_path), clock=clock)
        await gw.start()
        doors = await start_doors(gw, Tokens(gw.store), cfg)
        try:
            run = gw.create_run(script, "script", goal="read and set CH1")
            # A read the E36312A's profile calls read-only, *IDN? itself, and writes.
            for message in ("MEAS:VOLT? (@1)", "*IDN?", "VOLT 2,(@1)", "OUTP ON,(@1)",
                            "*RST"):
                with pytest.raises(WrongInstrument) as caught:
                    await gw.submit(run.id, "psu", message)
                assert names_both(caught.value.message), caught.value.message
            # The socket door: the same reason, as an SCPI error (-241, Hardware missing).
            host, port = doors.addresses["psu"]

            def door() -> list[str]:
                with contextlib.closing(socket.create_connection((host, port), 10)) as s, \
                        s.makefile("rwb") as f:
                    answers = []
                    for message in (b"VOLT 1,(@1)\n", b"MEAS:VOLT? (@1)\n"):
                        f.write(message)
                        f.write(b"SYST:ERR?\n")
                        f.flush()
                        answers.append(f.readline().decode().strip())
                    return answers
            for err in await asyncio.to_thread(door):
                assert err.startswith("-241,") and names_both(err), err
            shown = gw.instrument_identity("psu")
            assert shown["fits"] is False and shown["answered"].startswith(DP832)
            assert names_both(shown["words"])
            assert gw.list_requests(status=Status.PENDING) == []  # nothing held either
            events = [e for e in gw.journal(f"bench:{cfg.bench}:locks")
                      if e.type is EventType.INSTRUMENT_IDENTITY]
            assert events and events[0].data["fits"] is False
            # The other instrument of the bench is unaffected.
            assert (await gw.submit(run.id, "dmm", "*IDN?")).status == "executed"
        finally:
            await doors.close()
            await gw.close()
            gw.store.close()
        assert set(cable.sent[dp832.port]) == {"*IDN?"}, cable.sent
    assert dp832_state(dp832) == before


async def test_a_cable_moved_while_running_is_caught_before_the_next_write(
        sim: SimBenchThread, dp832: SimServedThread, db_path: Path, clock: Clock,
        script: Principal, olga: Principal) -> None:
    before = dp832_state(dp832)
    with Cable(sim.psu_port) as cable:
        gw = Gateway(bench(sim, cable.resource), SqliteStore(db_path), clock=clock)
        await gw.start()
        try:
            run = gw.create_run(script, "script", goal="CH1 to 2 V, then 3 V")
            # The matching instrument works as ever.
            assert (await gw.submit(run.id, "psu", "VOLT? (@1)")).status == "executed"
            first = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
            assert first is not None
            done = await gw.grant(first.id, olga, ["setpoint"],
                                  proposal_hash=first.proposal_hash)
            assert done.request.status is Status.EXECUTED, done.request.outcome
            assert e36312a_volts(sim) == 2
            second = (await gw.submit(run.id, "psu", "VOLT 3,(@1)")).request
            assert second is not None and second.status is Status.PENDING
            await quiet(cable, sim.psu_port)
            cable.move(dp832.port)  # same connection for the gateway, another instrument
            done = await gw.grant(second.id, olga, ["setpoint"],
                                  proposal_hash=second.proposal_hash)
            assert done.request.status is Status.FAILED, done.request.outcome
            assert names_both(done.request.outcome or ""), done.request.outcome
            assert done.request.superseded_by is None  # no fresh request judged on a DP832
            with pytest.raises(WrongInstrument):
                await gw.submit(run.id, "psu", "VOLT? (@1)")  # and nothing more to it
            # Whatever reached the DP832 asked who it is; nothing set anything there.
            to_dp832 = cable.sent[dp832.port]
            assert to_dp832 and all(m.endswith("*IDN?") for m in to_dp832), to_dp832
            assert dp832_state(dp832) == before
            # The cable put back: the E36312A works again, through the same connection.
            cable.move(sim.psu_port)
            assert (await gw.submit(run.id, "psu", "VOLT? (@1)")).response is not None
            assert gw.instrument_identity("psu")["fits"] is True
        finally:
            await gw.close()
            gw.store.close()
    assert e36312a_volts(sim) == 2, "3 V never reached the E36312A"


@pytest.mark.parametrize(("expected", "idn", "fit"), [
    ((E36312A,), "Keysight Technologies,E36312A,MY00000001,2.1.0", True),
    ((E36312A,), "KEYSIGHT  TECHNOLOGIES , e36312a ,MY1,2", True),  # case and spaces
    ((E36312A,), '"Keysight Technologies,E36312A,MY1,2"', True),  # quoted string data
    ((E36312A,), "Keysight Technologies,E36312,MY1,2", False),  # another model, a prefix
    ((E36312A,), "Keysight Technologies,E36312AB,MY1,2", False),
    ((E36312A,), DP832 + ",DP8C000000001,00.01.16", False),
    ((E36312A,), "", False),
    ((E36312A,), "Keysight Technologies", False),  # the model field missing
    ((), "anything at all", True),  # a generic profile checks nothing
])
def test_an_identity_fits_by_manufacturer_and_model_fields(
        expected: tuple[str, ...], idn: str, fit: bool) -> None:
    assert fits(expected, idn) is fit


def test_nothing_is_shown_to_fit_before_it_answered() -> None:
    """Before ``*IDN?`` was asked, nothing is known to fit: shown as unknown, not as fits."""
    mine = Identity("psu", "e36312a", identities(get_profile("e36312a")))
    assert mine.as_dict()["fits"] is None
    mine.judge("Keysight Technologies,E36312A,MY1,1.0")
    assert mine.as_dict()["fits"] is True
    anyone = Identity("gen", "generic", identities(get_profile("generic")))
    assert anyone.as_dict()["fits"] is True  # no identity: any instrument fits


def test_a_renamed_vendor_is_the_profiles_to_list() -> None:
    """The E3631A answered HEWLETT-PACKARD, then Agilent, then Keysight: its profile lists
    them; never a rule of the gateway's own about vendors."""
    expected = identities(get_profile("e3631a"))
    for maker in ("HEWLETT-PACKARD", "Agilent Technologies", "Keysight Technologies"):
        assert fits(expected, f"{maker},E3631A,0,2.1-5.0-1.0"), maker
    assert not fits(expected, "Keysight Technologies,E36312A,MY1,2")
    assert identities(get_profile("generic")) == ()


async def test_the_watch_finds_a_moved_cable_and_never_acts_on_another_model(
        sim: SimBenchThread, dp832: SimServedThread, db_path: Path, clock: Clock) -> None:
    """The cable moved to a DP832 whose CH1 is on at 20 V (the E36312A's envelope: 6 V):
    with no message at all, the watch finds who answers within its period, and sends it
    nothing but ``*IDN?``: no "safe action" of the E36312A's on a DP832."""
    with own_port(dp832.resource_name, panel=True) as res:
        res.write("SOUR1:VOLT 20")
        res.write("OUTP CH1,ON")
    before = dp832_state(dp832)
    with Cable(sim.psu_port) as cable:
        gw = Gateway(bench(sim, cable.resource), SqliteStore(db_path), clock=clock)
        await gw.start()
        try:
            start = gw.watch.checks
            for _ in range(300):  # the E36312A checked once, as it is
                if gw.watch.checks > start:
                    break
                await asyncio.sleep(0.05)
            assert gw.instrument_identity("psu")["fits"] is True
            await quiet(cable, sim.psu_port)
            cable.move(dp832.port)
            for _ in range(300):  # 15 s at most; the period is 1 s
                if gw.instrument_identity("psu")["fits"] is False:
                    break
                await asyncio.sleep(0.05)
            start = gw.watch.checks  # and a few more checks (of both instruments) after it
            for _ in range(300):
                if gw.watch.checks >= start + 4:
                    break
                await asyncio.sleep(0.05)
            assert gw.watch.checks >= start + 4
            shown = gw.instrument_identity("psu")
            assert shown["fits"] is False and names_both(shown["words"]), shown
        finally:
            await gw.close()
            gw.store.close()
        assert set(cable.sent[dp832.port]) == {"*IDN?"}, cable.sent[dp832.port]
    assert dp832_state(dp832) == before and before[2] == "ON"


async def test_the_watch_asks_a_meter_without_an_envelope_who_it_is(
        sim: SimBenchThread, dp832: SimServedThread, db_path: Path, clock: Clock) -> None:
    """The meter has no envelope, so nothing else of the watch reads it: its cable moved
    to a DP832 is shown all the same, before any message."""
    with Cable(sim.dmm_port) as cable:
        cfg = bench(sim, sim.psu_resource_name)
        cfg.instruments[1].resource = cable.resource
        gw = Gateway(cfg, SqliteStore(db_path), clock=clock)
        await gw.start()
        try:
            cable.move(dp832.port)
            for _ in range(300):  # 15 s at most; the period is 1 s
                if gw.instrument_identity("dmm")["fits"] is False:
                    break
                await asyncio.sleep(0.05)
            shown = gw.instrument_identity("dmm")
            assert shown["fits"] is False and DP832 in shown["words"], shown
            assert "Keysight Technologies,34465A" in shown["words"]
        finally:
            await gw.close()
            gw.store.close()
        assert set(cable.sent[dp832.port]) == {"*IDN?"}, cable.sent[dp832.port]


async def test_a_write_held_before_a_restart_fails_when_another_model_answers_after(
        sim: SimBenchThread, dp832: SimServedThread, db_path: Path, clock: Clock,
        script: Principal, olga: Principal) -> None:
    """Held on the E36312A; the gateway restarts with the cable on a DP832, so the lane
    knows before the write's turn: the write is refused there, recorded, nothing sent."""
    before = dp832_state(dp832)
    with Cable(sim.psu_port) as cable:
        gw = Gateway(bench(sim, cable.resource), SqliteStore(db_path), clock=clock)
        await gw.start()
        try:
            run = gw.create_run(script, "script", goal="CH1 to 2 V")
            held = (await gw.submit(run.id, "psu", "VOLT 2,(@1)")).request
            assert held is not None and held.status is Status.PENDING
        finally:
            await gw.close()
            gw.store.close()
        cable.move(dp832.port)
        gw = Gateway(bench(sim, cable.resource), SqliteStore(db_path), clock=clock)
        await gw.start()
        try:
            assert gw.instrument_identity("psu")["fits"] is False  # found at the start
            done = await gw.grant(held.id, olga, ["setpoint"], proposal_hash=held.proposal_hash)
            assert done.request.status is Status.FAILED, done.request.outcome
            assert names_both(done.request.outcome or ""), done.request.outcome
            assert "nothing was written" in (done.request.outcome or "")
        finally:
            await gw.close()
            gw.store.close()
        assert set(cable.sent[dp832.port]) == {"*IDN?"}, cable.sent[dp832.port]
    assert dp832_state(dp832) == before
    assert e36312a_volts(sim) != 2
