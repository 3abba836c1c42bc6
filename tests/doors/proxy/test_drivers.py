"""Real instrument drivers, unmodified, through the socket door against the simulated bench:
no read is ever held (issue 18). QCoDeS' Keysight34465A is constructed and snapshotted with
update=True and takes a reading at NPLC 100; PyMeasure's KeysightE36312A and Agilent34410A
read every property. A measurement that drives current into the DUT (the 34410A's
resistance) is no read: it is held as ``excites``, and answered once approved.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from bench_gate.gateway import Gateway
from bench_gate.models import EventType, Principal
from bench_gate.proxy import Doors
from tests.doors.proxy.test_proxy import in_thread, next_pending

qcodes_keysight = pytest.importorskip("qcodes.instrument_drivers.Keysight")
pymeasure_keysight = pytest.importorskip("pymeasure.instruments.keysight")
pymeasure_agilent = pytest.importorskip("pymeasure.instruments.agilent")


def _resource(doors: Doors, instrument: str) -> str:
    host, port = doors.addresses[instrument]
    return f"TCPIP0::{host}::{port}::SOCKET"


def _sent(gateway: Gateway) -> list[str]:
    return [e.data["message"] for run in gateway.store.list_runs()
            for e in gateway.store.journal(run.id, limit=1000)
            if e.type is EventType.COMMAND_RECEIVED]


def _refused(gateway: Gateway) -> list[tuple[str, str]]:
    return [(e.data["message"], e.data["reason"]) for run in gateway.store.list_runs()
            for e in gateway.store.journal(run.id, limit=1000)
            if e.type is EventType.WRITE_REFUSED]


async def test_qcodes_keysight_34465a_constructs_snapshots_and_reads(
        doors: Doors, gateway: Gateway) -> None:
    address = _resource(doors, "dmm")

    def script() -> tuple[dict[str, Any], float, float]:
        dmm = qcodes_keysight.Keysight34465A("dmm_door", address, visalib="@py",
                                             terminator="\n", timeout=10)
        try:
            snapshot = dmm.snapshot(update=True)
            dmm.NPLC(100)
            reading = dmm.volt()
            return snapshot, float(dmm.NPLC()), reading
        finally:
            dmm.close()

    snapshot, nplc, reading = await in_thread(script)
    assert gateway.list_requests() == [], "QCoDeS was held"
    assert _refused(gateway) == []
    assert snapshot["parameters"]["sense_function"]["value"] == "DC Voltage"
    assert snapshot["parameters"]["line_frequency"]["value"] == 50
    assert nplc == 100
    assert reading == pytest.approx(0.0)
    sent = _sent(gateway)
    assert "*OPT?" in sent and 'DISPLAY:TEXT ""' in sent and "SYSTem:LFRequency?" in sent
    assert len(sent) >= 28


async def test_pymeasure_keysight_e36312a_reads_every_property(
        doors: Doors, gateway: Gateway, front_panel: Any) -> None:
    front_panel.write("VOLT 2.5,(@2);:CURR 0.25,(@2)")
    supply = pymeasure_keysight.KeysightE36312A(
        _resource(doors, "psu"), visa_library="@py", read_termination="\n",
        write_termination="\n", timeout=5000)
    try:
        values = await in_thread(_read_properties, supply)
        for channel in (supply.ch_1, supply.ch_2, supply.ch_3):
            values.update({f"ch{channel.id}.{k}": v for k, v in
                           (await in_thread(_read_properties, channel)).items()})
    finally:
        supply.adapter.close()
    assert gateway.list_requests() == [], "PyMeasure's E36312A was held"
    assert _refused(gateway) == []
    assert values["ch2.voltage_setpoint"] == 2.5 and values["ch2.current_limit"] == 0.25
    assert values["ch1.output_enabled"] is False
    assert str(values["id"]).startswith("Keysight Technologies,E36312A")
    assert {"ch1.voltage", "ch3.current", "options", "status", "next_error"} <= set(values)


@pytest.mark.filterwarnings("ignore:It is not known whether this device support SCPI")
async def test_pymeasure_agilent_34410a_reads_every_passive_property(
        doors: Doors, gateway: Gateway, olga: Principal) -> None:
    meter = pymeasure_agilent.Agilent34410A(
        _resource(doors, "dmm"), visa_library="@py", read_termination="\n",
        write_termination="\n", timeout=15000)
    try:
        values = await in_thread(_read_properties, meter, ("resistance", "resistance_4w"))
        assert gateway.list_requests() == [], "a passive 34410A reading was held"
        assert _refused(gateway) == []  # its MEAS:VOLT:DC? DEF,DEF was refused (-108)
        assert set(values) >= {"voltage_dc", "voltage_ac", "current_dc", "current_ac", "id"}
        # A resistance reading sources a test current into the DUT: held, then answered.
        task = asyncio.ensure_future(in_thread(lambda: meter.resistance))
        req = await next_pending(gateway)
        assert [a.effect for a in req.actions] == ["excites"]
        assert req.actions[0].canonical == "MEAS:RES? DEF,DEF"
        await gateway.grant(req.id, olga, list(req.required), proposal_hash=req.proposal_hash)
        assert await asyncio.wait_for(task, 20) == pytest.approx(1000.0)
    finally:
        meter.adapter.close()


def _read_properties(obj: Any, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every property the driver class declares (PyMeasure's controls and measurements)."""
    out: dict[str, Any] = {}
    for name, member in inspect.getmembers(type(obj)):
        if isinstance(member, property) and not name.startswith("_") and name not in skip \
                and name not in ("channels", "functions"):
            out[name] = getattr(obj, name)
    return out
