"""The simulated bench: bench.yaml straight through pyvisa-sim, the linked models, and the
raw-socket server with a real pyvisa-py client. Sockets are on 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from decimal import Decimal

import pytest
import pyvisa
from hypothesis import given, settings
from hypothesis import strategies as st
from pyvisa.resources import MessageBasedResource

from bench_gate.scpi import format_number
from sim_instruments import (
    DMM_RESOURCE,
    ERROR_QUEUE_DEPTH,
    PSU_RESOURCE,
    BenchState,
    BenchStateError,
    SimBench,
    SimBenchThread,
    bench_yaml_path,
    open_fresh_resource_manager,
    open_resource_manager,
)

NR3 = re.compile(r"[+-]\d\.\d{8}E[+-]\d{2}")
NO_ERROR = '+0,"No error"'
CHANNELS = (1, 2, 3)
LIMITS = {1: (6.0, 5.0), 2: (25.0, 1.0), 3: (25.0, 1.0)}
LOADS = {1: 10.0, 2: 100.0, 3: 1000.0}


def _open(rm: pyvisa.ResourceManager, name: str, timeout: int = 2000) -> MessageBasedResource:
    res = rm.open_resource(name, read_termination="\n", write_termination="\n", timeout=timeout)
    assert isinstance(res, MessageBasedResource)
    return res


# --- bench.yaml straight through pyvisa-sim (canonical forms only)


@pytest.fixture
def sim_rm() -> Iterator[pyvisa.ResourceManager]:
    rm = open_fresh_resource_manager()
    yield rm
    rm.close()


@pytest.fixture(scope="module")
def shared_sim_rm() -> Iterator[pyvisa.ResourceManager]:
    # For tests that only read: a fresh library per test costs a YAML parse.
    rm = open_fresh_resource_manager()
    yield rm
    rm.close()


@pytest.fixture
def sim_psu(sim_rm: pyvisa.ResourceManager) -> MessageBasedResource:
    return _open(sim_rm, PSU_RESOURCE)


@pytest.fixture
def sim_dmm(sim_rm: pyvisa.ResourceManager) -> MessageBasedResource:
    return _open(sim_rm, DMM_RESOURCE)


def test_packaged_definition_lists_both_resources() -> None:
    assert bench_yaml_path().name == "bench.yaml"
    rm = open_resource_manager()
    assert set(rm.list_resources("?*")) == {PSU_RESOURCE, DMM_RESOURCE}
    assert open_resource_manager() is rm  # pyvisa shares one library per path
    assert _open(rm, PSU_RESOURCE).query("*IDN?").startswith("Keysight Technologies,E36312A,")


def test_fresh_resource_managers_do_not_share_state() -> None:
    first, second = open_fresh_resource_manager(), open_fresh_resource_manager()
    try:
        _open(first, PSU_RESOURCE).write("VOLT 5.0,(@1)")
        assert float(_open(second, PSU_RESOURCE).query("VOLT? (@1)")) == 0.0
    finally:
        first.close()
        second.close()


PSU_READS: list[tuple[str, str]] = [
    ("*IDN?", r"Keysight Technologies,E36312A,MY\d+,[\d.-]+"),
    ("*OPC?", "1"),
    ("*ESR?", r"\d+"),
    ("*STB?", r"\d+"),
    ("*ESE?", r"\d+"),
    ("*SRE?", r"\d+"),
    ("*TST?", "0"),
    ("SYST:ERR?", re.escape(NO_ERROR)),
    ("SYST:VERS?", r"1999\.0"),
    ("INST:NSEL?", "[123]"),
    ("INST:SEL?", "CH[123]"),
]
for _n in CHANNELS:
    PSU_READS += [
        (f"VOLT? (@{_n})", NR3.pattern),
        (f"CURR? (@{_n})", NR3.pattern),
        (f"OUTP? (@{_n})", "[01]"),
        (f"MEAS:VOLT? (@{_n})", NR3.pattern),
        (f"MEAS:CURR? (@{_n})", NR3.pattern),
        (f"VOLT:PROT? (@{_n})", NR3.pattern),
        (f"VOLT:PROT:TRIP? (@{_n})", "[01]"),
        (f"VOLT? MIN,(@{_n})", NR3.pattern),
        (f"VOLT? MAX,(@{_n})", NR3.pattern),
        (f"CURR? MIN,(@{_n})", NR3.pattern),
        (f"CURR? MAX,(@{_n})", NR3.pattern),
    ]

DMM_READS: list[tuple[str, str]] = [
    ("*IDN?", r"Keysight Technologies,34465A,MY\d+,[\w.-]+"),
    ("*OPC?", "1"),
    ("*ESR?", r"\d+"),
    ("*STB?", r"\d+"),
    ("SYST:ERR?", re.escape(NO_ERROR)),
    ("SYST:VERS?", r"1994\.0"),
    ("VOLT:NPLC?", NR3.pattern),
    ("TRIG:SOUR?", "IMM"),
    ("FUNC?", '"VOLT"'),
    ("SAMP:COUN?", r"\d+"),
]
# MEASure?, READ? and CONF? are the model's (SimDmm), never pyvisa-sim's: see test_dmm_*.


@pytest.mark.parametrize(("query", "pattern"), PSU_READS)
def test_pyvisa_sim_answers_psu_read(
    shared_sim_rm: pyvisa.ResourceManager, query: str, pattern: str
) -> None:
    assert re.fullmatch(pattern, _open(shared_sim_rm, PSU_RESOURCE).query(query))


@pytest.mark.parametrize(("query", "pattern"), DMM_READS)
def test_pyvisa_sim_answers_dmm_read(
    shared_sim_rm: pyvisa.ResourceManager, query: str, pattern: str
) -> None:
    assert re.fullmatch(pattern, _open(shared_sim_rm, DMM_RESOURCE).query(query))


def test_pyvisa_sim_defaults(sim_psu: MessageBasedResource) -> None:
    for ch in CHANNELS:
        assert float(sim_psu.query(f"VOLT? (@{ch})")) == 0.0
        assert float(sim_psu.query(f"CURR? (@{ch})")) == 1.0
        assert sim_psu.query(f"OUTP? (@{ch})") == "0"
        assert float(sim_psu.query(f"VOLT:PROT? (@{ch})")) == (6.6 if ch == 1 else 27.5)
        vmax, imax = LIMITS[ch]
        assert float(sim_psu.query(f"VOLT? MAX,(@{ch})")) == vmax
        assert float(sim_psu.query(f"CURR? MAX,(@{ch})")) == imax
    assert sim_psu.query("INST:NSEL?") == "1"
    assert sim_psu.query("INST:SEL?") == "CH1"


PSU_WRITES: list[tuple[str, str, str]] = [  # (write, read-back query, expected answer)
    ("INST:NSEL 2", "INST:NSEL?", "2"),
    ("INST:SEL CH3", "INST:SEL?", "CH3"),
    ("*ESE 5", "*ESE?", "5"),
    ("*SRE 16", "*SRE?", "16"),
    ("*RST", "VOLT? (@1)", "+0.00000000E+00"),
    ("*CLS", "SYST:ERR?", NO_ERROR),
    ("*OPC", "*OPC?", "1"),
    ("*WAI", "*OPC?", "1"),
    ("*SAV 3", "*OPC?", "1"),
    ("*RCL 3", "*OPC?", "1"),
]
for _n in CHANNELS:
    PSU_WRITES += [
        (f"VOLT 5.0,(@{_n})", f"VOLT? (@{_n})", "+5.00000000E+00"),
        (f"VOLT 0.000001,(@{_n})", f"VOLT? (@{_n})", "+1.00000000E-06"),
        (f"VOLT 0.0,(@{_n})", f"VOLT? (@{_n})", "+0.00000000E+00"),
        (f"CURR 0.1,(@{_n})", f"CURR? (@{_n})", "+1.00000000E-01"),
        (f"OUTP 1,(@{_n})", f"OUTP? (@{_n})", "1"),
        (f"OUTP 0,(@{_n})", f"OUTP? (@{_n})", "0"),
        (f"VOLT:PROT 5.5,(@{_n})", f"VOLT:PROT? (@{_n})", "+5.50000000E+00"),
        (f"VOLT:PROT:CLE (@{_n})", f"VOLT:PROT:TRIP? (@{_n})", "0"),
    ]
PSU_WRITES.append(("VOLT 12.25,(@2)", "VOLT? (@2)", "+1.22500000E+01"))


@pytest.mark.parametrize(("command", "query", "expected"), PSU_WRITES)
def test_pyvisa_sim_takes_psu_write(
    sim_psu: MessageBasedResource, command: str, query: str, expected: str
) -> None:
    sim_psu.write(command)
    assert sim_psu.query("SYST:ERR?") == NO_ERROR
    assert sim_psu.query(query) == expected


@pytest.mark.parametrize("command", ["*RST", "*CLS", "VOLT:NPLC 1.0", 'FUNC "CURR"',
                                     "TRIG:SOUR BUS"])
def test_pyvisa_sim_takes_dmm_write(sim_dmm: MessageBasedResource, command: str) -> None:
    sim_dmm.write(command)
    assert sim_dmm.query("SYST:ERR?") == NO_ERROR


def test_pyvisa_sim_queues_undefined_header(sim_psu: MessageBasedResource) -> None:
    sim_psu.write("VOLT 5,(@1)")  # not canonical: pyvisa-sim matches exactly
    assert sim_psu.query("SYST:ERR?") == '-113,"Undefined header"'
    assert sim_psu.query("SYST:ERR?") == NO_ERROR
    assert sim_psu.query("*ESR?") == "32"


@settings(max_examples=60, deadline=None)
@given(st.decimals(min_value=0, max_value=6, places=6))
def test_every_rendered_voltage_reaches_pyvisa_sim(value: Decimal) -> None:
    # The contract between the gateway's renderer and the YAML's {:f} fields.
    rm = open_resource_manager()
    psu = _open(rm, PSU_RESOURCE)
    psu.write(f"VOLT {format_number(value)},(@1)")
    assert psu.query("SYST:ERR?") == NO_ERROR
    assert float(psu.query("VOLT? (@1)")) == pytest.approx(float(value), rel=1e-8, abs=1e-12)


# --- the linked models, in process


@pytest.fixture
def bench() -> Iterator[SimBenchThread]:
    with SimBenchThread() as running:
        yield running


def test_measurements_follow_setpoints_only_while_output_is_on(bench: SimBenchThread) -> None:
    psu = bench.psu
    psu.handle_message("APPL CH1,5,1")
    assert psu.handle_message("MEAS:VOLT? (@1);:MEAS:CURR? (@1)") == "+0.00000000E+00;" \
        "+0.00000000E+00"
    psu.handle_message("OUTP ON,(@1)")
    assert psu.handle_message("MEAS:VOLT? (@1);:MEAS:CURR? (@1)") == "+5.00000000E+00;" \
        "+5.00000000E-01"
    psu.handle_message("VOLT 3,(@1)")
    assert float(psu.handle_message("MEAS:VOLT? (@1)") or "nan") == 3.0
    psu.handle_message("OUTP OFF,(@1)")
    assert float(psu.handle_message("MEAS:VOLT? (@1)") or "nan") == 0.0


def test_current_limit_caps_the_load(bench: SimBenchThread) -> None:
    bench.psu.handle_message("APPL CH1,5,0.1;:OUTP ON,(@1)")
    # 10 ohm load, 0.1 A limit: constant current at 1 V.
    assert bench.psu.handle_message("MEAS:VOLT? (@1);:MEAS:CURR? (@1)") == (
        "+1.00000000E+00;+1.00000000E-01")


def test_overvoltage_trips_and_clears(bench: SimBenchThread) -> None:
    psu = bench.psu
    psu.handle_message("APPL CH1,5,1;:OUTP ON,(@1);:VOLT:PROT 4,(@1)")
    assert psu.handle_message("VOLT:PROT:TRIP? (@1);:OUTP? (@1);:MEAS:VOLT? (@1)") == (
        "1;0;+0.00000000E+00")
    psu.handle_message("OUTP ON,(@1)")  # refused while tripped
    assert psu.handle_message("OUTP? (@1)") == "0"
    psu.handle_message("VOLT:PROT 6.6,(@1);:VOLT:PROT:CLE (@1);:OUTP ON,(@1)")
    assert psu.handle_message("VOLT:PROT:TRIP? (@1);:MEAS:VOLT? (@1)") == "0;+5.00000000E+00"


def test_rst_restores_every_default(bench: SimBenchThread) -> None:
    psu = bench.psu
    psu.handle_message("*ESE 4;APPL CH2,12,0.5;:OUTP ON,(@2);:VOLT:PROT 20,(@2);:INST CH3")
    psu.handle_message("*RST")
    assert psu.handle_message("VOLT? (@2);CURR? (@2);:OUTP? (@2);:VOLT:PROT? (@2)") == (
        "+0.00000000E+00;+1.00000000E+00;0;+2.75000000E+01")
    assert psu.handle_message("MEAS:VOLT? (@2);:INST:NSEL?;:INST:SEL?") == (
        "+0.00000000E+00;1;CH1")
    assert psu.handle_message("*ESE?") == "4"  # IEEE 488.2: *RST leaves the enables alone


def test_sav_and_rcl(bench: SimBenchThread) -> None:
    psu = bench.psu
    psu.handle_message("APPL CH1,2.5,0.2;*SAV 1;*RST")
    psu.handle_message("*RCL 1")
    assert psu.handle_message("APPL? CH1") == "+2.50000000E+00,+2.00000000E-01"
    psu.handle_message("*RCL 7")  # never saved: power-on settings
    assert psu.handle_message("APPL? CH1") == "+0.00000000E+00,+1.00000000E+00"


def test_error_queue_order_status_and_overflow(bench: SimBenchThread) -> None:
    psu = bench.psu
    assert psu.handle_message("VOLT 9,(@1)") is None  # refused by the parser: -222
    assert psu.handle_message("SIM:NOPE") is None  # unknown: pyvisa-sim says -113
    assert psu.handle_message("*STB?") == "4"  # error queue not empty
    first = psu.handle_message("SYST:ERR?") or ""
    assert first.startswith('-222,"Data out of range')
    # A complete profile names the header it does not know (an instrument says less).
    assert (psu.handle_message("SYST:ERR?") or "").startswith('-113,"Undefined header; SIM:NOPE')
    assert psu.handle_message("SYST:ERR?") == NO_ERROR
    assert psu.handle_message("*ESR?") == "48"  # CME | EXE
    assert psu.handle_message("*ESR?") == "0"
    for _ in range(ERROR_QUEUE_DEPTH + 5):
        psu.handle_message("FOO")
    answers = [psu.handle_message("SYST:ERR?") for _ in range(ERROR_QUEUE_DEPTH + 1)]
    assert answers[ERROR_QUEUE_DEPTH - 1] == '-350,"Queue overflow"'
    assert answers[ERROR_QUEUE_DEPTH] == NO_ERROR
    # An undefined header refuses its whole message (the profile is complete), so *CLS
    # after it in the same message never runs; on its own it clears the queue.
    psu.handle_message("FOO;*CLS")
    assert (psu.handle_message("SYST:ERR?") or "").startswith("-113,")
    psu.handle_message("FOO")
    psu.handle_message("*CLS")
    assert psu.handle_message("SYST:ERR?;*ESR?") == f"{NO_ERROR};0"


def test_dmm_measures_psu_channel_1(bench: SimBenchThread) -> None:
    bench.psu.handle_message("APPL CH1,4,1;:OUTP ON,(@1)")
    dmm = bench.dmm
    assert dmm.handle_message("MEAS:VOLT:DC?") == "+4.00000000E+00"
    assert dmm.handle_message("MEAS:CURR:DC?") == "+4.00000000E-01"
    assert dmm.handle_message("CONF?") == '"CURR +1.00000000E+00,+3.00000000E-07"'
    assert dmm.handle_message("READ?") == "+4.00000000E-01"
    dmm.handle_message("CONF:VOLT:DC")
    assert dmm.handle_message("READ?;CONF?") == (
        '+4.00000000E+00;"VOLT +1.00000000E+01,+3.00000000E-06"')
    dmm.handle_message("*RST")
    assert dmm.handle_message("CONF?") == '"VOLT +1.00000000E+01,+3.00000000E-06"'


# --- the LAN server, with a real pyvisa-py client


@pytest.fixture(scope="module")
def py_rm() -> Iterator[pyvisa.ResourceManager]:
    rm = pyvisa.ResourceManager("@py")
    yield rm
    rm.close()


@pytest.fixture
def lan_psu(bench: SimBenchThread, py_rm: pyvisa.ResourceManager
            ) -> Iterator[MessageBasedResource]:
    res = _open(py_rm, f"TCPIP0::127.0.0.1::{bench.psu_port}::SOCKET")
    yield res
    res.close()


@pytest.fixture
def lan_dmm(bench: SimBenchThread, py_rm: pyvisa.ResourceManager
            ) -> Iterator[MessageBasedResource]:
    res = _open(py_rm, bench.dmm_resource_name)
    yield res
    res.close()


@pytest.fixture(scope="module")
def shared_bench() -> Iterator[SimBenchThread]:
    with SimBenchThread() as running:
        yield running


@pytest.mark.parametrize(("query", "pattern"), PSU_READS)
def test_lan_answers_psu_read(
    shared_bench: SimBenchThread, py_rm: pyvisa.ResourceManager, query: str, pattern: str
) -> None:
    res = _open(py_rm, shared_bench.psu_resource_name)
    try:
        assert re.fullmatch(pattern, res.query(query))
    finally:
        res.close()


@pytest.mark.parametrize(("query", "pattern"), DMM_READS)
def test_lan_answers_dmm_read(
    shared_bench: SimBenchThread, py_rm: pyvisa.ResourceManager, query: str, pattern: str
) -> None:
    res = _open(py_rm, shared_bench.dmm_resource_name)
    try:
        assert re.fullmatch(pattern, res.query(query))
    finally:
        res.close()


@pytest.mark.parametrize(("command", "query", "expected"), PSU_WRITES)
def test_lan_takes_psu_write(
    lan_psu: MessageBasedResource, command: str, query: str, expected: str
) -> None:
    lan_psu.write(command)
    assert lan_psu.query("SYST:ERR?") == NO_ERROR
    assert lan_psu.query(query) == expected


@pytest.mark.parametrize(
    "message",
    [
        "VOLT 5.0,(@1)",
        "VOLTage 5,(@1)",
        "SOUR:VOLT:LEV:IMM:AMPL 5000mV,(@1)",
        ":source:voltage:level 5e0,(@1)",
        "volt 5",  # the selected channel, CH1 after power-on
        "volt 5;curr 0.1",
        "INST:NSEL 1;:VOLT 5",
        "INST P6V;:VOLT 5",
        "APPL CH1,5,0.1",
        "APPLy P6V,5.000",
        "VOLT 5,(@1:2)",
    ],
)
def test_lan_accepts_every_spelling_of_a_voltage(lan_psu: MessageBasedResource, message: str
                                                 ) -> None:
    lan_psu.write(message)
    assert lan_psu.query("SYST:ERR?") == NO_ERROR
    assert lan_psu.query("VOLT? (@1)") == "+5.00000000E+00"


def test_lan_selection_forms(lan_psu: MessageBasedResource) -> None:
    lan_psu.write("INST:NSEL 2;:VOLT 3;CURR 0.25")
    assert lan_psu.query("VOLT? (@2);CURR? (@2)") == "+3.00000000E+00;+2.50000000E-01"
    assert lan_psu.query("INST:SEL?") == "CH2"
    lan_psu.write("INST CH3")
    assert lan_psu.query("INST:NSEL?;:VOLT?") == "3;+0.00000000E+00"
    assert lan_psu.query("INST:NSEL 2;:VOLT?") == "+3.00000000E+00"
    assert lan_psu.query("INST:SEL?") == "CH2"  # selection is the instrument's state


def test_lan_compound_and_crlf(lan_psu: MessageBasedResource) -> None:
    lan_psu.write_raw(b"APPL CH1,5,1;:OUTP ON,(@1)\r\n")
    assert lan_psu.query("MEAS:VOLT? (@1);:MEAS:CURR? (@1);:OUTP? (@1)") == (
        "+5.00000000E+00;+5.00000000E-01;1")
    assert lan_psu.query("APPL? CH1;:VOLT? (@1:3)") == (
        "+5.00000000E+00,+1.00000000E+00;+5.00000000E+00,+0.00000000E+00,+0.00000000E+00")


def test_lan_rst_resets(lan_psu: MessageBasedResource) -> None:
    lan_psu.write("APPL CH2,10,0.5;:OUTP ON,(@2);:INST:NSEL 3")
    lan_psu.write("*RST")
    assert lan_psu.query("VOLT? (@2);CURR? (@2);:OUTP? (@2);:MEAS:VOLT? (@2);:INST:NSEL?") == (
        "+0.00000000E+00;+1.00000000E+00;0;+0.00000000E+00;1")


@pytest.mark.parametrize(
    ("message", "prefix"),
    [
        ("VOLT 9,(@1)", '-222,"Data out of range'),
        ("FOO:BAR 1", '-113,"Undefined header'),
        ("VOLT 5,,(@1)", "-1"),  # a syntax error of some kind
        ("VOLT 5;*IDN", "-113,"),  # *IDN is query-only
    ],
)
def test_lan_errors_show_in_syst_err(lan_psu: MessageBasedResource, message: str, prefix: str
                                     ) -> None:
    lan_psu.write(message)
    assert lan_psu.query("SYST:ERR?").startswith(prefix)
    assert lan_psu.query("SYST:ERR?") == NO_ERROR


def test_lan_dmm_reads_psu(lan_psu: MessageBasedResource, lan_dmm: MessageBasedResource
                           ) -> None:
    lan_psu.write("APPL CH1,2,1;:OUTP ON,(@1)")
    assert lan_dmm.query("meas:volt?") == "+2.00000000E+00"
    lan_dmm.write("CONF:CURR")
    assert lan_dmm.query("READ?") == "+2.00000000E-01"


def test_front_panel_change_is_seen_by_another_client(
    bench: SimBenchThread, py_rm: pyvisa.ResourceManager, lan_psu: MessageBasedResource
) -> None:
    front_panel = _open(py_rm, bench.psu_resource_name)
    try:
        assert lan_psu.query("VOLT? (@2)") == "+0.00000000E+00"
        front_panel.write("VOLT 7.5,(@2)")
        # The two connections are served side by side: *OPC? on the writer's own connection
        # answers only once its write was handled (IEEE 488.2 §10.19), so the read follows it.
        assert front_panel.query("*OPC?") == "1"
        assert lan_psu.query("VOLT? (@2)") == "+7.50000000E+00"
        assert bench.psu.handle_message("VOLT? (@2)") == "+7.50000000E+00"
    finally:
        front_panel.close()


def test_two_clients_never_interleave(bench: SimBenchThread, py_rm: pyvisa.ResourceManager
                                      ) -> None:
    rounds = 40
    failures: list[str] = []

    def client(channel: int) -> None:
        res = _open(py_rm, bench.psu_resource_name)
        try:
            for i in range(rounds):
                volts = format_number(Decimal(i % 5) + Decimal(channel) / 10)
                answer = res.query(f"VOLT {volts},(@{channel});:VOLT? (@{channel});*IDN?")
                expected = f"{float(volts):+.8E};Keysight Technologies,E36312A"
                if not answer.startswith(expected):
                    failures.append(f"{channel}: {answer!r} != {expected!r}...")
        except Exception as exc:  # a thread's exception would otherwise be lost
            failures.append(f"{channel}: {exc!r}")
        finally:
            res.close()

    threads = [threading.Thread(target=client, args=(ch,)) for ch in (2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert failures == []


def test_async_api_and_lifecycle() -> None:
    async def scenario() -> None:
        bench = SimBench()
        with pytest.raises(BenchStateError):
            _ = bench.psu_port
        psu_port, dmm_port = await bench.start()
        assert bench.state is BenchState.RUNNING
        assert (bench.psu_port, bench.dmm_port) == (psu_port, dmm_port)
        with pytest.raises(BenchStateError):
            await bench.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", dmm_port)
        writer.write(b"*IDN?\r\n*OPC?\n")
        first = await asyncio.wait_for(reader.readline(), 5)
        second = await asyncio.wait_for(reader.readline(), 5)
        assert first.startswith(b"Keysight Technologies,34465A,")
        assert second == b"1\n"
        await bench.stop()  # with the connection still open
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        with pytest.raises(BenchStateError):
            await bench.stop()

    asyncio.run(scenario())


def test_cli_serves_until_terminated(py_rm: pyvisa.ResourceManager) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim_instruments", "serve", "--psu-port", "0", "--dmm-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert proc.stdout is not None
        names = [proc.stdout.readline().split()[1] for _ in range(2)]
        assert all(re.fullmatch(r"TCPIP0::127\.0\.0\.1::\d+::SOCKET", n) for n in names)
        res = _open(py_rm, names[0])
        try:
            assert res.query("*IDN?").startswith("Keysight Technologies,E36312A,")
        finally:
            res.close()
        proc.terminate()
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
