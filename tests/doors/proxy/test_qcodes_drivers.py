"""QCoDeS drivers of the profiled instruments that test_drivers.py does not run, unmodified,
through the socket door of a real server (``ServerThread``): the Rigol DP832 (``RigolDP832``)
and the Keithley 2450 (``Keithley2450``). For each:

- its normal start (the constructor with its connect message, ``snapshot(update=True)``) and
  every read of its parameters pass unattended: no request is made, nothing waits;
- every parameter it can set is held, each a request a person decides over the HTTP API:
  the denied ones change nothing on the simulator's own port, the approved one changes its
  channel alone; the driver's session carries on after each decision.

Approvals come from ``olga`` (an operator) over HTTP, a second person to the script.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx
import pytest

from bench_gate.auth import Tokens
from bench_gate.config import ChannelLimits, InstrumentConfig, default_config
from bench_gate.server import ServerThread
from bench_gate.store import open_store
from sim_instruments import SimBenchThread, SimServedThread
from tests.conftest import own_port

rigol = pytest.importorskip("qcodes.instrument_drivers.rigol")
keithley = pytest.importorskip("qcodes.instrument_drivers.Keithley")


@dataclass
class Bench:
    url: str
    server: ServerThread
    served: dict[str, SimServedThread]
    olga: str

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30,
                            headers={"Authorization": f"Bearer {self.olga}"})

    def door(self, instrument: str) -> str:
        host, port = self.server.running.doors[instrument]
        return f"TCPIP0::{host}::{port}::SOCKET"

    def requests(self, instrument: str) -> list[dict[str, Any]]:
        with self.http() as h:
            r = h.get("/v1/takeover", params={"instrument": instrument, "limit": 1000})
            assert r.status_code == 200, r.text
            return list(r.json())

    def next_pending(self, instrument: str, seen: set[str], within: float = 10.0
                     ) -> dict[str, Any]:
        """The first pending request on ``instrument`` not in ``seen`` (bounded wait)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            for req in self.requests(instrument):
                if req["status"] == "pending" and req["id"] not in seen:
                    seen.add(req["id"])
                    return req
            time.sleep(0.05)
        raise AssertionError(f"nothing held on {instrument} within {within} s")

    def decide(self, req: dict[str, Any], approve: bool) -> dict[str, Any]:
        with self.http() as h:
            shown = h.get(f"/v1/takeover/{req['id']}").json()
            path = f"/v1/runs/{req['runId']}/takeover/{req['id']}"
            if approve:
                r = h.post(f"{path}/grant", json={"approve": shown["approvalsMissing"],
                                                  "proposalHash": shown["proposalHash"]})
            else:
                r = h.post(f"{path}/deny", json={"notes": "not on this DUT",
                                                 "proposalHash": shown["proposalHash"]})
            assert r.status_code == 200, r.text
            return dict(h.get(f"/v1/takeover/{req['id']}").json())


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from _serve(tmp_path_factory, "wait")


@pytest.fixture(scope="module")
def refusing_bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    """The same bench with ``socket_door.on_hold = "refuse"`` for every connection."""
    yield from _serve(tmp_path_factory, "refuse")


def _serve(tmp_path_factory: pytest.TempPathFactory, on_hold: Any) -> Iterator[Bench]:
    with SimBenchThread() as sim, SimServedThread("dp832") as dp832, \
            SimServedThread("smu") as smu:
        config = default_config(sim.psu_port, sim.dmm_port)
        config.socket_door.on_hold = on_hold
        config.instruments += [
            InstrumentConfig(name="dp832", resource=dp832.resource_name, profile="dp832"),
            InstrumentConfig(name="smu", resource=smu.resource_name, profile="k2450")]
        for ic in config.instruments:
            ic.socket_port = 0
        config.envelope["dp832"] = {ch: ChannelLimits(voltage=Decimal(6), current=Decimal(1))
                                    for ch in (1, 2, 3)}
        config.envelope["smu"] = {1: ChannelLimits(voltage=Decimal(6), current=Decimal("0.1"))}
        store = open_store(tmp_path_factory.mktemp("qcodes") / "bench.db")
        olga = Tokens(store).create("olga", "operator")[1]
        server = ServerThread(config, store)
        try:
            yield Bench(server.url, server, {"dp832": dp832, "smu": smu}, olga)
        finally:
            server.close()
            store.close()


def _gettable(instrument: Any) -> Iterator[Any]:
    for param in instrument.parameters.values():
        if param.gettable and param.name != "IDN":
            yield param


# ------------------------------------------------------------------ Rigol DP832

DP832_SETS: list[tuple[str, Any]] = [
    ("set_voltage", 1.5), ("set_current", 0.25), ("state", "on"), ("ovp_value", 5.0),
    ("ovp_state", "on"), ("ocp_value", 0.5), ("ocp_state", "on")]


def _dp832_state(res: Any) -> dict[int, tuple[str, ...]]:
    """What every channel holds, read on the simulator's own port."""
    return {ch: tuple(res.query(q.format(ch=ch)).strip() for q in (
        "SOUR{ch}:VOLT?", "SOUR{ch}:CURR?", "OUTP? CH{ch}", "SOUR{ch}:VOLT:PROT?",
        "SOUR{ch}:VOLT:PROT:STAT?", "SOUR{ch}:CURR:PROT?", "SOUR{ch}:CURR:PROT:STAT?"))
        for ch in (1, 2, 3)}


def test_qcodes_rigol_dp832_starts_and_reads_unattended(bench: Bench) -> None:
    """The constructor asks *OPT? (which precision option is installed) before anything
    else: held, it stopped the driver's start with a timeout."""
    seen = {r["id"] for r in bench.requests("dp832")}
    psu = rigol.RigolDP832("dp832_reads", bench.door("dp832"), visalib="@py",
                           terminator="\n", timeout=5)
    try:
        snapshot = psu.snapshot(update=True)
        values = {param.full_name: param.get() for channel in psu.channels
                  for param in _gettable(channel)}
        assert psu.ask("*OPC?") == "1"
    finally:
        psu.close()
    assert {r["id"] for r in bench.requests("dp832")} == seen, "a read of RigolDP832 was held"
    assert snapshot["submodules"]["ch1"]["parameters"]["state"]["value"] == "OFF"
    assert len(values) == 3 * 11 and values["dp832_reads_ch3_voltage"] == 0.0


@pytest.mark.parametrize("channel", ["ch1", "ch2", "ch3"])
@pytest.mark.parametrize(("name", "value"), DP832_SETS)
def test_qcodes_rigol_dp832_every_setter_is_held(bench: Bench, channel: str, name: str,
                                                 value: Any) -> None:
    """Each settable parameter of each channel, set once by a driver of its own (a run of
    its own: three denials in a row suspend a run): held; denied, nothing changes on the
    simulator's own port; CH2's voltage, approved, changes CH2 alone. The driver's session
    answers after the decision."""
    seen = {r["id"] for r in bench.requests("dp832")}
    approve = channel == "ch2" and name == "set_voltage"
    psu = rigol.RigolDP832(f"dp832_{channel}_{name}", bench.door("dp832"), visalib="@py",
                           terminator="\n", timeout=10)
    with own_port(bench.served["dp832"].resource_name) as res:
        try:
            before = _dp832_state(res)
            psu.submodules[channel].parameters[name].set(value)
            req = bench.next_pending("dp832", seen)
            decided = bench.decide(req, approve)
            assert decided["status"] == ("executed" if approve else "denied"), decided
            assert psu.ask("*OPC?") == "1"  # the session goes on
            after = _dp832_state(res)
            if approve:
                assert float(after[2][0]) == 1.5
                assert {**after, 2: before[2]} == before
                assert float(psu.ch2.set_voltage()) == 1.5
            else:
                assert after == before, req["commands"]
                assert psu.ask("SYST:ERR?").startswith("-203,"), "the denial is in the queue"
        finally:
            psu.close()


def test_qcodes_rigol_dp832_with_the_door_refusing_holds(refusing_bench: Bench) -> None:
    """With ``on_hold = "refuse"`` a driver with a short timeout never waits on a person:
    its setter is answered at once (-203 naming the request), its reads go on with the old
    value, and once the request is approved over HTTP the driver's same call, repeated,
    runs it: CH1 at 1.5 V on the simulator's own port."""
    bench = refusing_bench
    seen = {r["id"] for r in bench.requests("dp832")}
    psu = rigol.RigolDP832("dp832_refusing", bench.door("dp832"), visalib="@py",
                           terminator="\n", timeout=2)
    with own_port(bench.served["dp832"].resource_name) as res:
        try:
            psu.ch1.set_voltage(1.5)
            assert psu.ch1.set_voltage() == 0.0  # at once: nothing ran
            error = psu.ask("SYST:ERR?")
            req = bench.next_pending("dp832", seen)
            assert error.startswith("-203,") and req["id"] in error, error
            decided = bench.decide(req, approve=True)
            assert decided["status"] == "approved", decided  # it runs on the resend
            assert float(res.query("SOUR1:VOLT?")) == 0.0
            psu.ch1.set_voltage(1.5)  # the same call again
            assert psu.ch1.set_voltage() == 1.5
            assert psu.ask("SYST:ERR?").lstrip("+").startswith("0,")
            assert float(res.query("SOUR1:VOLT?")) == 1.5
        finally:
            psu.close()
    assert bench.requests("dp832")[0]["status"] == "executed"


# ------------------------------------------------------------------ Keithley 2450

#: What the SMU holds, read on the simulator's own port.
SMU_STATE = ("SOUR1:FUNC?", "ROUT:TERM?", "OUTP1?", "SOUR1:VOLT?", "SOUR1:VOLT:ILIM?",
             "SOUR1:VOLT:RANG?", "SOUR1:VOLT:RANG:AUTO?", "SENS:VOLT:RSEN?", "SENS:FUNC?")


def _smu_state(res: Any) -> tuple[str, ...]:
    return tuple(res.query(q).strip() for q in SMU_STATE)


def _smu(bench: Bench, name: str) -> Any:
    smu = keithley.Keithley2450(name, bench.door("smu"), visalib="@py", terminator="\n",
                                timeout=10)
    for sub in (*smu.submodules.values(),):  # the user delay to read: user_delay's number
        if "user_number" in getattr(sub, "parameters", {}):
            sub.user_number(1)
    return smu


#: Parameters that measure only with the output on, or sweep: not read here.
SMU_NOT_READ = frozenset({"current", "voltage", "resistance", "sweep", "sweep_axis"})


def test_qcodes_keithley_2450_starts_and_reads_unattended(bench: Bench) -> None:
    """Construction, snapshot(update=True) and every parameter of every source and sense
    function: no hold. Before, :SENSe:RESistance:AZERo? and the user delays'
    :SOURce:<function>:DELay:USER<n>? were headers the profile did not list, held (the
    driver's session blocked behind each); and the simulated 2450 named its measure
    function "VOLT", where the 2450 answers "VOLT:DC" (QCoDeS raised KeyError)."""
    seen = {r["id"] for r in bench.requests("smu")}
    smu = _smu(bench, "smu_reads")
    try:
        snapshot = smu.snapshot(update=True)
        values = {f"{key}.{param.name}": param.get() for key, sub in smu.submodules.items()
                  if hasattr(sub, "parameters") for param in _gettable(sub)
                  if param.name not in SMU_NOT_READ}
        assert smu.ask("*OPC?") == "1"
    finally:
        smu.close()
    assert {r["id"] for r in bench.requests("smu")} == seen, "a read of Keithley2450 was held"
    assert snapshot["parameters"]["sense_function"]["value"] == "voltage"
    user_delays = [v for k, v in values.items() if k.endswith("user_delay")]
    assert len(user_delays) == 5 and all(float(v) == 0 for v in user_delays), values
    assert sum(k.endswith("auto_zero_enabled") for k in values) == 3, values


#: (what the driver does, the value): each sends a unit a person must decide.
SMU_HELD: list[tuple[str, Any]] = [
    ("source.voltage", 1.0), ("source.limit", 0.01), ("source.range", 2),
    ("source.auto_range", False), ("source_function", "current"), ("terminals", "rear"),
    ("sense.four_wire_measurement", True),
    ("sense_function", "resistance")]


def _parameter(smu: Any, path: str) -> Any:
    owner, _, name = path.rpartition(".")
    return (getattr(smu, owner) if owner else smu).parameters[name]


@pytest.mark.parametrize(("path", "value"), SMU_HELD)
def test_qcodes_keithley_2450_every_setter_that_acts_is_held(bench: Bench, path: str,
                                                             value: Any) -> None:
    """Each held, by a driver of its own; denied, nothing changes on the simulator's own
    port; the source voltage, approved, changes the voltage alone. QCoDeS' source level
    setter asks *OPC? right after its write: it returns once the person decided."""
    seen = {r["id"] for r in bench.requests("smu")}
    approve = path == "source.voltage"
    smu = _smu(bench, f"smu_{path.replace('.', '_')}")
    with own_port(bench.served["smu"].resource_name) as res, \
            ThreadPoolExecutor(1) as pool:
        try:
            before = _smu_state(res)
            setting = pool.submit(_parameter(smu, path).set, value)
            req = bench.next_pending("smu", seen)
            decided = bench.decide(req, approve)
            assert decided["status"] == ("executed" if approve else "denied"), decided
            setting.result(timeout=20)
            assert smu.ask("*OPC?") == "1"  # the session goes on
            after = _smu_state(res)
            if approve:
                assert float(after[3]) == 1.0
                assert after[:3] + after[4:] == before[:3] + before[4:]
            else:
                assert after == before, req["commands"]
                assert smu.ask("SYST:ERR?").startswith("-203,")
        finally:
            smu.close()


def test_qcodes_keithley_2450_output_on_outside_the_envelope_is_refused(bench: Bench) -> None:
    """The output on, with the current source's voltage limit (21 V) above the bench's 6 V:
    refused at once with a -222 that says why; nothing held, nothing changes."""
    seen = {r["id"] for r in bench.requests("smu")}
    smu = _smu(bench, "smu_output")
    with own_port(bench.served["smu"].resource_name) as res:
        try:
            before = _smu_state(res)
            smu.output_enabled(True)
            error = smu.ask("SYST:ERR?")
            assert error.startswith("-222,") and "6.0 V" in error, error
            assert _smu_state(res) == before
        finally:
            smu.close()
    assert {r["id"] for r in bench.requests("smu")} == seen


SMU_PASSES: list[tuple[str, Any, str, str]] = [
    ("sense.nplc", 2, "SENS:VOLT:NPLC?", "2"), ("sense.count", 3, "SENS:COUN?", "3"),
    ("source.delay", 0.5, "SOUR1:VOLT:DEL?", "0.5"),
    ("source.user_delay", 0.25, "SOUR:VOLT:DEL:USER1?", "0.25"),
    ("sense.user_delay", 0.75, "SENS:VOLT:DEL:USER1?", "0.75")]


@pytest.mark.parametrize(("path", "value", "query", "shows"), SMU_PASSES)
def test_qcodes_keithley_2450_measure_settings_pass(bench: Bench, path: str, value: Any,
                                                    query: str, shows: str) -> None:
    """A measure setting (no source level, no output) runs at once, as the 2450 applies it."""
    seen = {r["id"] for r in bench.requests("smu")}
    smu = _smu(bench, f"smu_pass_{path.replace('.', '_')}")
    try:
        _parameter(smu, path).set(value)
        assert smu.ask("*OPC?") == "1"
    finally:
        smu.close()
    assert {r["id"] for r in bench.requests("smu")} == seen, "a measure setting was held"
    with own_port(bench.served["smu"].resource_name) as res:
        assert float(res.query(query)) == float(shows)
