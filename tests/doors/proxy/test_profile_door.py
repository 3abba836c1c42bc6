"""The instruments as their users know them, through the socket door: harmless queries pass
at once, a typo on a complete profile is refused at once with -113 and a hint (never held),
a meter's passive settings pass as measure-config, and a function that drives the DUT is
held with a handoff that says what the meter applies. Real pyvisa-py clients over TCP, the
simulated bench served on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from bench_gate.gateway import Gateway
from bench_gate.models import EventType, Principal, Status
from tests.doors.proxy.test_proxy import in_thread, next_pending

NO_ERROR = '+0,"No error"'

#: Queries the E36312A's old profile held or refused (issue 18), each with what it answers.
PSU_QUERIES = ["*OPT?", "*LRN?", "STAT:QUES:COND?", "STAT:OPER:COND?", "SYST:CHAN:COUN?",
               "OUTP:PAIR?", "CURR:PROT:STAT?", "VOLT:PROT:STAT?", "SYST:ERR:COUN?", "APPL?",
               "CAL:STAT?", "CURR:PROT:STAT? (@2)", "STAT:QUES:INST:ISUM3:COND?",
               "FETC:VOLT? (@1)", "VOLT:PROT:STAT? (@1,2,3)"]
#: The 34465A's, and the drivers' defaults it refused (-108).
DMM_QUERIES = ["FETC?", "MEAS:VOLT:AC?", "SENS:VOLT:DC:RANG?", "VOLT:DC:NPLC?", "TRIG:SOUR?",
               "SAMP:COUN?", "DATA:POIN?", "MEAS:VOLT:DC? 10,0.001", "MEAS:VOLT:DC? AUTO",
               "MEAS:VOLT:DC? DEF,DEF", "MEAS:CURR:DC?", "*OPT?", "SENS:FUNC?", "SYST:LFR?",
               "DISP:TEXT?", "DISP:STAT?", "TRIG:COUN?", "SAMP:TIM? MIN", "*LRN?",
               "STAT:QUES:COND?"]


def _ask_all(client: Any, queries: list[str]) -> dict[str, tuple[str, str]]:
    return {q: (client.query(q), client.query("SYST:ERR?")) for q in queries}


@pytest.mark.parametrize(("instrument", "queries"), [("psu", PSU_QUERIES), ("dmm", DMM_QUERIES)])
async def test_harmless_queries_pass_at_once(open_client: Callable[..., Any], gateway: Gateway,
                                             instrument: str, queries: list[str]) -> None:
    client = open_client(instrument)
    answers = await in_thread(_ask_all, client, queries)
    for query, (answer, error) in answers.items():
        assert answer, query
        assert error == NO_ERROR, (query, error)
    assert not gateway.list_requests(), "a harmless query was held"


async def test_appl_alone_answers_for_the_selected_channel(
        open_client: Callable[..., Any], front_panel: Any) -> None:
    front_panel.write("VOLT 2.5,(@2)")
    psu = open_client()

    def script() -> tuple[str, str]:
        psu.write("INST:NSEL 2")
        return psu.query("APPL?"), psu.query("SYST:ERR?")

    answer, error = await in_thread(script)
    volts, amps = answer.split(",")
    assert (Decimal(volts), Decimal(amps)) == (Decimal("2.5"), Decimal(1))
    assert error == NO_ERROR


@pytest.mark.parametrize(("instrument", "typo", "hint"), [
    ("psu", "VOLTT 1,(@3)", "[SOURce:]VOLTage[:LEVel][:IMMediate][:AMPLitude]"),
    ("psu", "BOGUS:THING?", ""),
    ("dmm", "BOGUS:THING?", ""),
    ("dmm", "VOLT:DC:NPLCC 10", "[SENSe:]VOLTage[:DC]:NPLC"),
    ("dmm", "CONF:VOLTT", "CONFigure[:SCALar]:VOLTage[:DC]"),
])
async def test_a_typo_on_a_complete_profile_is_refused_at_once(
        open_client: Callable[..., Any], gateway: Gateway, instrument: str, typo: str,
        hint: str) -> None:
    client = open_client(instrument)

    def script() -> tuple[str, str]:
        client.write(typo)
        return client.query("SYST:ERR?"), client.query("*IDN?")

    error, idn = await in_thread(script)
    assert error.startswith('-113,"Undefined header;'), error
    assert typo.split(" ")[0] in error
    assert (f"closest: {hint}" in error) if hint else "closest" not in error
    assert idn, "the stream carries on at once"
    assert not gateway.list_requests(), "a typo became a pending request"
    (run,) = gateway.store.list_runs()
    refused = [e for e in gateway.store.recent(run.id) if e.type is EventType.WRITE_REFUSED]
    assert [e.data["code"] for e in refused] == [-113]


async def test_meter_settings_pass_and_are_journaled(
        open_client: Callable[..., Any], gateway: Gateway) -> None:
    dmm = open_client("dmm")

    def script() -> tuple[str, str, str, str]:
        dmm.write("CONF:CURR:DC")
        dmm.write("VOLT:DC:NPLC 1;:TRIG:SOUR BUS;:SAMP:COUN 3")
        dmm.write('DISP:TEXT ""')  # QCoDeS' constructor: front-panel text only
        dmm.write("TRIG:SOUR IMM;:SAMP:COUN 1")
        return (dmm.query("CONF?"), dmm.query("VOLT:DC:NPLC?"), dmm.query("MEAS:VOLT:DC?"),
                dmm.query("SYST:ERR?"))

    conf, nplc, reading, error = await in_thread(script)
    assert conf.startswith('"CURR ')
    assert Decimal(nplc) == 1
    assert reading and error == NO_ERROR
    assert not gateway.list_requests()
    (run,) = gateway.store.list_runs()
    executed = [e.data["canonical"] for e in gateway.store.recent(run.id, limit=50)
                if e.type is EventType.READ_EXECUTED]
    assert ["CONF:CURR:DC"] in executed  # journaled, like every unit that passes
    assert ["VOLT:NPLC 1.0", "TRIG:SOUR BUS", "SAMP:COUN 3"] in executed


@pytest.mark.parametrize(("message", "words"), [
    ("CONF:RES", "test current"),
    ('SENS:FUNC "FRES"', "source leads"),
    ("CONF:DIOD", "forward-biases a diode"),
    ("CONF:TEMP RTD", "RTD or thermistor"),
    ("MEAS:CAP?", "charges and discharges"),
])
async def test_a_function_that_drives_the_dut_is_held_with_what_it_applies(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal, message: str,
        words: str) -> None:
    dmm = open_client("dmm", timeout=15000)
    task = asyncio.ensure_future(in_thread(dmm.write, message))
    req = await next_pending(gateway)
    assert [a.effect for a in req.actions] == ["excites"]
    assert [k.value for k in req.required] == ["state"]
    handoff = req.handoff
    assert handoff["reversibility"].startswith("excites the DUT: the meter applies")
    assert words in handoff["reversibility"]
    assert words in req.actions[0].words
    assert "outputs are off" not in str(handoff)
    assert "the meter drives current or voltage into the DUT" in handoff["risk"]["signals"]
    await gateway.grant(req.id, olga, list(req.required), proposal_hash=req.proposal_hash)
    await task
    final = gateway.get_request(req.id)
    assert final.status is Status.EXECUTED, final.outcome


async def test_a_thermocouple_is_passive(open_client: Callable[..., Any],
                                         gateway: Gateway) -> None:
    dmm = open_client("dmm")

    def script() -> tuple[str, str]:
        dmm.write("CONF:TEMP TC,K")
        return dmm.query("CONF?"), dmm.query("SYST:ERR?")

    conf, error = await in_thread(script)
    assert conf == '"TEMP"' and error == NO_ERROR
    assert not gateway.list_requests()


async def test_the_meter_handoff_speaks_of_a_meter(
        open_client: Callable[..., Any], gateway: Gateway) -> None:
    dmm = open_client("dmm", timeout=15000)
    task = asyncio.ensure_future(in_thread(dmm.write, "*RST"))
    req = await next_pending(gateway)
    words = req.handoff["reversibility"]
    assert "outputs are off" not in words and "reaches the DUT until enabled" not in words
    assert "a meter has no outputs" in words
    dmm.close()  # the client goes: its held write is cancelled
    await task
    await _until(lambda: gateway.get_request(req.id).status is Status.CANCELLED)


async def _until(check: Callable[[], bool]) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition never became true")
