"""Build a corpus of real driver messages for bench/classify.py --corpus.

    python bench/driver_corpus.py [--out bench/driver_corpus.txt]

The drivers of the profiled instruments run, unmodified, against the simulated bench served
on 127.0.0.1 (straight to the simulator, not through the gateway), and every message they
send is recorded as they sent it:

- PyMeasure ``KeysightE36312A``: every property read, of the instrument and its three
  channels, and every control set to a legal value;
- PyMeasure ``Agilent34410A``: every measurement;
- QCoDeS ``Keysight34465A``: construction, ``snapshot(update=True)``, every settable
  parameter set to the value it has, every measurement parameter read, and its methods
  (``init_measurement``, ``fetch``, ``read``, ``abort_measurement``, ``reset``);
- PyMeasure ``Keithley2450`` (the SMU, simulated on its own): every property a 2450 answers
  read, every source and measure method, the output on and off, and ``reset``;
- PyMeasure ``KeithleyDMM6500`` (simulated on its own, no scanner card): every property it
  answers in its default function read, every ``measure_*`` method, filters, ranges,
  relative, autozero, the beeper, and ``reset``;
- PyMeasure ``KeysightE3631A`` (simulated on its own, outputs by selection): every property
  of the instrument and its three outputs read (not *OPT?), each output's setpoints and
  output set, tracking, and ``reset``.
- QCoDeS ``RigolDP832`` (simulated on its own, channels by selection): construction,
  ``snapshot(update=True)``, every parameter of its three channels read, every settable one
  set.

Each line: ``profile<TAB>driver<TAB>message``, in the order sent.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sim_instruments import PANEL, Session, SimBenchThread, SimInstrument, SimServedThread

DEFAULT_OUT = Path(__file__).with_name("driver_corpus.txt")


@contextmanager
def recording(instrument: SimInstrument, sink: list[str]) -> Iterator[None]:
    """Every message the simulated instrument receives, appended to ``sink``."""
    original = instrument.handle_message

    def handle(message: str, session: Session = PANEL) -> str | None:
        sink.append(message)
        return original(message, session)

    instrument.handle_message = handle  # type: ignore[method-assign]
    try:
        yield
    finally:
        instrument.handle_message = original  # type: ignore[method-assign]


def _properties(obj: Any) -> list[str]:
    return [name for name, member in inspect.getmembers(type(obj))
            if isinstance(member, property) and not name.startswith("_")
            and name not in ("channels", "functions")]


def _read_all(obj: Any) -> None:
    for name in _properties(obj):
        getattr(obj, name)


def pymeasure_e36312a(resource: str) -> None:
    from pymeasure.instruments.keysight import KeysightE36312A

    supply = KeysightE36312A(resource, visa_library="@py", read_termination="\n",
                             write_termination="\n", timeout=5000)
    try:
        _read_all(supply)
        for channel in (supply.ch_1, supply.ch_2, supply.ch_3):
            _read_all(channel)
            channel.voltage_setpoint = 1.0
            channel.current_limit = 0.1
            channel.output_enabled = True
            channel.output_enabled = False
        supply.clear()
        supply.reset()
    finally:
        supply.adapter.close()


def pymeasure_34410a(resource: str) -> None:
    from pymeasure.instruments.agilent import Agilent34410A

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        meter = Agilent34410A(resource, visa_library="@py", read_termination="\n",
                              write_termination="\n", timeout=5000)
    try:
        _read_all(meter)
    finally:
        meter.adapter.close()


def qcodes_34465a(resource: str) -> None:
    from qcodes.instrument_drivers.Keysight import Keysight34465A

    dmm = Keysight34465A("corpus_dmm", resource, visalib="@py", terminator="\n", timeout=5)
    try:
        dmm.snapshot(update=True)
        for param in _qcodes_parameters(dmm):
            if param.settable and param.gettable:
                param.set(param.get())
        for name in ("volt", "curr", "volt_ac", "curr_ac", "res", "four_wire_res"):
            if name in dmm.parameters:
                dmm.parameters[name].get()
        dmm.init_measurement()
        dmm.fetch()
        dmm.read()
        dmm.abort_measurement()
        dmm.reset()
    finally:
        dmm.close()


#: Keithley2450 properties a real 2450 cannot answer either
#: (tests/instruments/test_k2450.py says why).
NOT_2450 = frozenset({"options", "buffer_data", "error", *(
    f"{stat}_{what}" for stat in ("mean", "max", "min", "std")
    for what in ("voltage", "current", "resistance"))})


def pymeasure_k2450(resource: str) -> None:
    from pymeasure.instruments.keithley import Keithley2450

    smu = Keithley2450(resource, visa_library="@py", read_termination="\n",
                       write_termination="\n", timeout=5000)
    try:
        for name in _properties(smu):
            if name not in NOT_2450:
                getattr(smu, name)
        smu.apply_voltage(compliance_current=0.01)
        smu.source_voltage = 1.0
        smu.measure_current(nplc=1, current=0.001, auto_range=False)
        smu.measure_voltage()
        smu.enable_source()
        smu.current  # noqa: B018 (a reading)
        smu.disable_source()
        smu.apply_current(current_range=0.01, compliance_voltage=5)
        smu.source_current = 0.001
        smu.measure_resistance()
        smu.source_voltage_delay_auto = True
        smu.voltage_nplc = 2
        smu.voltage_filter_count = 5
        smu.current_output_off_state = "NORM"
        smu.reset()
    finally:
        smu.adapter.close()


#: KeithleyDMM6500 properties a DMM6500 without a scanner card cannot answer in DC volts:
#: *OPT? (no DMM6500 command), the AC detector bandwidth, the scanner card's.
NOT_DMM6500 = frozenset({"options", "detector_bandwidth", "display_screen",
                         "pseudo_scanner_enabled"})


def pymeasure_dmm6500(resource: str) -> None:
    from pymeasure.instruments.keithley import KeithleyDMM6500

    meter = KeithleyDMM6500(resource, visa_library="@py", read_termination="\n",
                            write_termination="\n", timeout=5000)
    try:
        for name in _properties(meter):
            if name not in NOT_DMM6500 and not name.startswith("scan_"):
                getattr(meter, name)
        meter.measure_voltage(max_voltage=10)
        meter.enable_filter(type="moving", count=5)
        meter.disable_filter()
        meter.auto_range()
        meter.trigger_single_autozero()
        meter.voltage  # noqa: B018 (a reading)
        meter.measure_voltage(ac=True)
        meter.measure_current()
        meter.measure_current(ac=True)
        meter.measure_frequency()
        meter.measure_period()
        meter.measure_resistance()
        meter.measure_resistance(wires=4)
        meter.measure_capacitance()
        meter.measure_diode()
        meter.measure_continuity()
        meter.measure_temperature()
        meter.beep(1000, 0.1)
        meter.reset()
    finally:
        meter.adapter.close()


def pymeasure_e3631a(resource: str) -> None:
    from pymeasure.instruments.keysight import KeysightE3631A

    supply = KeysightE3631A(resource, visa_library="@py", read_termination="\n",
                            write_termination="\n", timeout=5000)
    try:
        for name in _properties(supply):
            if name != "options":  # *OPT? is no E3631A command (User's Guide, chapter 4)
                getattr(supply, name)
        for number, channel in enumerate((supply.ch_1, supply.ch_2, supply.ch_3), 1):
            _read_all(channel)
            channel.voltage_setpoint = -1.0 if number == 3 else 1.0
            channel.current_limit = 0.1
            channel.output_enabled = True  # OUTPut 1, (@n): no E3631A takes that list
        supply.output_enabled = True
        supply.output_enabled = False
        supply.tracking_enabled = False
        supply.reset()
    finally:
        supply.adapter.close()


#: A legal value for each settable parameter of QCoDeS' RigolDP832 channels.
DP832_VALUES = {"set_voltage": 1.0, "set_current": 0.1, "state": "off", "ovp_value": 5.0,
                "ovp_state": "off", "ocp_value": 0.5, "ocp_state": "off"}


def qcodes_dp832(resource: str) -> None:
    from qcodes.instrument_drivers.rigol import RigolDP832

    psu = RigolDP832("corpus_dp832", resource, visalib="@py", terminator="\n", timeout=5)
    try:
        psu.snapshot(update=True)
        for channel in psu.channels:
            for param in channel.parameters.values():
                param.get()
            for name, value in DP832_VALUES.items():
                channel.parameters[name].set(value)
    finally:
        psu.close()


def _qcodes_parameters(instrument: Any) -> Iterator[Any]:
    skip = {"IDN", "timeout", "volt", "curr", "volt_ac", "curr_ac", "res", "four_wire_res",
            "timetrace", "time_axis"}
    for name, param in instrument.parameters.items():
        if name not in skip:
            yield param
    for sub in instrument.submodules.values():
        yield from sub.parameters.values()


DRIVERS: list[tuple[str, str, str, Callable[[str], None]]] = [
    ("e36312a", "psu", "pymeasure KeysightE36312A", pymeasure_e36312a),
    ("34465a", "dmm", "pymeasure Agilent34410A", pymeasure_34410a),
    ("34465a", "dmm", "qcodes Keysight34465A", qcodes_34465a),
    ("k2450", "smu", "pymeasure Keithley2450", pymeasure_k2450),
    ("dmm6500", "dmm6500", "pymeasure KeithleyDMM6500", pymeasure_dmm6500),
    ("e3631a", "e3631a", "pymeasure KeysightE3631A", pymeasure_e3631a),
    ("dp832", "dp832", "qcodes RigolDP832", qcodes_dp832),
]


def _settle(sent: list[str], quiet: float = 0.5) -> None:
    seen = -1
    while seen != len(sent):
        seen = len(sent)
        time.sleep(quiet)


def build() -> list[tuple[str, str, str]]:
    corpus: list[tuple[str, str, str]] = []
    with SimBenchThread() as bench, SimServedThread("smu") as smu, \
            SimServedThread("dmm6500") as dmm6500, SimServedThread("e3631a") as e3631a, \
            SimServedThread("dp832") as dp832:
        served = {"psu": (bench.psu, bench.psu_resource_name),
                  "dmm": (bench.dmm, bench.dmm_resource_name),
                  "smu": (smu.instrument, smu.resource_name),
                  "dmm6500": (dmm6500.instrument, dmm6500.resource_name),
                  "e3631a": (e3631a.instrument, e3631a.resource_name),
                  "dp832": (dp832.instrument, dp832.resource_name)}
        for profile, which, driver, run in DRIVERS:
            instrument, resource = served[which]
            sent: list[str] = []
            with recording(instrument, sent):
                run(resource)
                _settle(sent)  # writes sent just before the driver closed still arrive
            corpus += [(profile, driver, message) for message in sent]
    return corpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    corpus = build()
    args.out.write_text("".join(f"{p}\t{d}\t{m}\n" for p, d, m in corpus), encoding="utf-8")
    print(f"{len(corpus)} messages from {len(DRIVERS)} drivers -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
