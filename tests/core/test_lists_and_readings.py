"""Lists, coupling and readings that excite, through the socket door with real pyvisa-py
clients and the simulated bench on 127.0.0.1.

The E36312A's list mode (``LIST:VOLT``, ``LIST:CURR``...), trigger coupling (``INST:COUP``)
and pairing (``OUTP:PAIR``) are real commands whose effect on the outputs cannot be
predicted: held for every approval with their parameters shown, never passed, and a list
point above the envelope is refused before it is stored. On the 34465A, a ``READ?``,
``INIT`` or ``*TRG`` measures with the function configured now: held as ``excites`` while
that function drives current into the DUT, passed at once while it is passive. The
function is asked of the live instrument every time (the front panel can change it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import pyvisa
from hypothesis import given
from hypothesis import strategies as st

from bench_gate.gateway import Gateway
from bench_gate.models import ApprovalKind, EventType, Principal, Status
from bench_gate.profile_check import Level, check_profile
from bench_gate.scpi import ExcitationSpec, ProfileError, ScpiError, applied, classify, get_profile
from sim_instruments import SimBenchThread
from tests.doors.proxy.test_proxy import in_thread, next_pending, until

NO_ERROR = '+0,"No error"'
EVERY = [ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE, ApprovalKind.STATE]


@pytest.fixture
def meter_panel(sim: SimBenchThread) -> Iterator[Any]:
    """A direct connection to the simulated meter: the person at its front panel."""
    rm = pyvisa.ResourceManager("@py")
    res = rm.open_resource(sim.dmm_resource_name, read_termination="\n",
                           write_termination="\n", timeout=2000)
    res.write("SIM:PANEL")
    yield res
    res.close()
    rm.close()


# ---------------------------------------------------------------- lists and coupling (E36312A)


@pytest.mark.parametrize(("message", "canonical"), [
    ("LIST:VOLT 1,2,3,(@1)", "LIST:VOLT 1.0,2.0,3.0,(@1)"),
    ("LIST:CURR 0.1,0.25,(@2)", "LIST:CURR 0.1,0.25,(@2)"),
    ("LIST:DWEL 0.5,1,2,(@3)", "LIST:DWEL 0.5,1.0,2.0,(@3)"),
    ("LIST:TOUT:BOST ON,0,1,(@1)", "LIST:TOUT:BOST 1,0,1,(@1)"),
    ("INST:COUP CH1,CH2", "INST:COUP CH1,CH2"),
    ("INST:COUP (@1:3)", "INST:COUP (@1,2,3)"),
    ("OUTP:PAIR OFF", "OUTP:PAIR OFF"),  # SER and PAR: tests/test_review_holes_3.py
])
async def test_lists_and_coupling_are_held_for_every_approval(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal, message: str,
        canonical: str) -> None:
    psu = open_client("psu", timeout=15000)
    task = asyncio.ensure_future(in_thread(psu.write, message))
    req = await next_pending(gateway)
    assert [a.canonical for a in req.actions] == [canonical]  # the parameters, as sent
    assert canonical in req.actions[0].words
    assert req.actions[0].unpredictable and req.actions[0].effect == "state"
    assert list(req.required) == EVERY
    await gateway.grant(req.id, olga, EVERY, proposal_hash=req.proposal_hash)
    await task
    done = gateway.get_request(req.id)
    assert done.status is Status.EXECUTED, done.outcome
    assert await in_thread(psu.query, "SYST:ERR?") == NO_ERROR


async def test_an_approved_list_reaches_the_instrument(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal,
        front_panel: Any) -> None:
    psu = open_client("psu", timeout=15000)
    task = asyncio.ensure_future(in_thread(psu.write, "LIST:VOLT 1.5,2.5,(@1)"))
    req = await next_pending(gateway)
    await gateway.grant(req.id, olga, EVERY, proposal_hash=req.proposal_hash)
    await task
    points = await in_thread(front_panel.query, "LIST:VOLT? (@1)")
    assert [Decimal(p) for p in points.split(",")] == [Decimal("1.5"), Decimal("2.5")]


@pytest.mark.parametrize("message", [
    "LIST:VOLT 1,5,20,(@2)",   # CH2's limit is 12 V: the third point is above it
    "LIST:VOLT 1,7",           # CH1 selected below: its limit is 6 V (the instrument's too)
    "LIST:CURR 0.1,0.9,(@3)",  # CH3's limit is 0.5 A
    "VOLT:TRIG 20,(@2)",       # a triggered level is judged like a list point
])
async def test_a_level_above_the_envelope_is_refused_before_it_is_stored(
        open_client: Callable[..., Any], gateway: Gateway, front_panel: Any,
        message: str) -> None:
    psu = open_client("psu")

    def script() -> str:
        psu.write("INST:NSEL 1")
        psu.write(message)
        return str(psu.query("SYST:ERR?"))

    error = await in_thread(script)
    assert error.startswith("-222,"), error
    assert "later trigger" in error or "outside" in error
    assert not gateway.list_requests(), "a level above the envelope was held"
    assert (await in_thread(front_panel.query, "LIST:VOLT? (@2)")).split(",")[0] in ("0", "0.0")


async def test_the_read_back_after_a_coupling_command_judges_the_real_state(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal,
        front_panel: Any) -> None:
    """The envelope is checked on what the instrument says after the write, whatever the
    command was: CH2 above its limit and on, found after an approved OUTP:PAIR OFF, is made
    safe at once."""
    front_panel.write("VOLT 20,(@2)")
    front_panel.write("OUTP 1,(@2)")
    psu = open_client("psu", timeout=15000)
    task = asyncio.ensure_future(in_thread(psu.write, "OUTP:PAIR OFF"))
    req = await next_pending(gateway)
    await gateway.grant(req.id, olga, EVERY, proposal_hash=req.proposal_hash)
    await task
    done = gateway.get_request(req.id)
    assert "safe action" in (done.outcome or ""), done.outcome
    assert await in_thread(front_panel.query, "OUTP? (@2)") == "0"
    breaches = [e for e in gateway.store.recent(req.run_id, limit=50)
                if e.type is EventType.ENVELOPE_BREACH]
    assert breaches and breaches[0].data["safe_action"] == ["OUTP:DEL:FALL 0.0,(@2)",
                                                             "OUTP 0,(@2)"]


def test_list_points_are_typed_and_bounded() -> None:
    c = classify("LIST:VOLT 1,MAX,2.5,(@2)", "e36312a")
    (unit,) = c.units
    assert unit.canonical == "LIST:VOLT 1.0,25.0,2.5,(@2)"
    assert unit.reach == (("voltage", Decimal(25)),)
    assert unit.field is None  # nothing is set now: the setpoint stays as it is
    for bad, code in [("LIST:VOLT 1,30,(@2)", -222), ("LIST:VOLT 1,FOO,(@1)", -224),
                      ("LIST:VOLT " + ",".join(["1"] * 513) + ",(@1)", -223),
                      ("INST:COUP (@1,4)", -222), ("INST:COUP FOO", -224),
                      ("LIST:TOUT:BOST 1,2V,(@1)", -104)]:
        with pytest.raises(ScpiError) as err:
            classify(bad, "e36312a")
        assert err.value.code == code, (bad, err.value)


def test_a_profile_repeats_only_its_last_parameter(tmp_path: Any) -> None:
    path = tmp_path / "repeats.yaml"
    path.write_text(
        "name: repeats\ntitle: t\ncommands:\n  - header: LIST\n    set: {effect: state, params: "
        "[{name: a, type: integer, range: [0, 9], repeat: 4}, {name: b, type: integer, "
        "range: [0, 9]}]}\n", encoding="utf-8")
    with pytest.raises(ProfileError, match="only the last parameter"):
        get_profile(str(path))


# ---------------------------------------------------------------- readings that excite (34465A)


async def _held_reading(gateway: Gateway, olga: Principal, dmm: Any, query: str,
                        words: str) -> str:
    task = asyncio.ensure_future(in_thread(dmm.query, query))
    req = await next_pending(gateway)
    assert [a.effect for a in req.actions] == ["excites"]
    assert [k.value for k in req.required] == ["state"]
    assert words in req.actions[0].words
    assert req.handoff["reversibility"].startswith("excites the DUT: the meter applies")
    assert words in req.handoff["reversibility"]
    await gateway.grant(req.id, olga, list(req.required), proposal_hash=req.proposal_hash)
    answer = await task
    assert gateway.get_request(req.id).status is Status.EXECUTED
    return str(answer)


async def test_after_an_approved_resistance_function_a_reading_is_held(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal) -> None:
    dmm = open_client("dmm", timeout=15000)
    task = asyncio.ensure_future(in_thread(dmm.write, "CONF:RES"))
    req = await next_pending(gateway)
    await gateway.grant(req.id, olga, list(req.required), proposal_hash=req.proposal_hash)
    await task
    reading = await _held_reading(gateway, olga, dmm, "READ?", "test current")
    assert Decimal(reading) == 1000  # the simulated DUT's resistance, once approved

    def passive() -> tuple[str, str]:
        dmm.write("CONF:VOLT:DC")
        return dmm.query("READ?"), dmm.query("SYST:ERR?")

    answer, error = await in_thread(passive)
    assert answer and error == NO_ERROR
    assert len(gateway.list_requests()) == 2, "a passive reading was held"


@pytest.mark.parametrize(("function", "setting", "words"), [
    ('"RES"', None, "test current"),
    ('"FRES"', None, "source leads"),
    ('"CAP"', None, "charges and discharges"),
    ('"CONT"', None, "1 mA test current"),
    ('"DIOD"', None, "forward-biases a diode"),
    ('"TEMP"', "TEMP:TRAN:TYPE RTD", "RTD or thermistor"),
    ('"TEMP"', "TEMP:TRAN:TYPE THER", "RTD or thermistor"),
])
async def test_a_function_set_at_the_front_panel_holds_a_reading(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal, meter_panel: Any,
        function: str, setting: str | None, words: str) -> None:
    """No cache: the gateway asks the meter on the reading's own turn on the lane."""
    dmm = open_client("dmm", timeout=15000)
    assert (await in_thread(dmm.query, "READ?")) and not gateway.list_requests()
    meter_panel.write(f"FUNC {function}")
    if setting:
        meter_panel.write(setting)
    assert await _held_reading(gateway, olga, dmm, "READ?", words)


async def test_every_trigger_and_spelling_is_held_while_the_function_excites(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal,
        meter_panel: Any) -> None:
    dmm = open_client("dmm", timeout=15000)
    meter_panel.write('FUNC "RES"')
    for trigger in ("INIT", "*TRG", "init:imm", ":read?", "SAMP:COUN 1;:READ?"):
        seen = {r.id for r in gateway.list_requests()}
        call = dmm.query if trigger.endswith("?") else dmm.write
        task = asyncio.ensure_future(in_thread(call, trigger))
        req = await next_pending(gateway, seen)
        assert "excites" in [a.effect for a in req.actions], trigger
        assert "test current" in req.handoff["reversibility"]
        await gateway.grant(req.id, olga, list(req.required), proposal_hash=req.proposal_hash)
        await task
        await until(lambda rid=req.id: gateway.get_request(rid).status is Status.EXECUTED)


async def test_passive_functions_pass_every_trigger_and_fetch_is_no_trigger(
        open_client: Callable[..., Any], gateway: Gateway, meter_panel: Any) -> None:
    dmm = open_client("dmm")
    for function, setting in [('"VOLT"', None), ('"VOLT:AC"', None), ('"CURR"', None),
                              ('"FREQ"', None), ('"TEMP"', "TEMP:TRAN:TYPE TC")]:
        meter_panel.write(f"FUNC {function}")
        if setting:
            meter_panel.write(setting)

        def script() -> tuple[str, str]:
            dmm.write("INIT")
            dmm.write("*TRG")
            return dmm.query("READ?"), dmm.query("SYST:ERR?")

        reading, error = await in_thread(script)
        assert reading and error == NO_ERROR, function
    assert not gateway.list_requests()
    meter_panel.write('FUNC "RES"')
    assert await in_thread(dmm.query, "FETC?"), "FETC? returns readings already taken"
    assert not gateway.list_requests()


async def test_the_function_is_asked_once_per_reading_on_its_own_turn(
        open_client: Callable[..., Any], gateway: Gateway) -> None:
    dmm = open_client("dmm")
    asked: list[str] = []
    lane = gateway.core.instrument("dmm").lane
    real = lane.link.query

    async def spy(command: str, *timeout: Any) -> str:
        asked.append(command)
        return await real(command, *timeout)

    lane.link.query = spy  # type: ignore[method-assign]
    try:
        await in_thread(dmm.query, "READ?;READ?")
        await in_thread(dmm.query, "SENS:VOLT:DC:RANG?")
    finally:
        lane.link.query = real  # type: ignore[method-assign]
    assert asked[:3] == ["FUNC?", "READ?", "READ?"]  # asked once, then the readings
    assert asked[3:] == list(classify("SENS:VOLT:DC:RANG?", "34465a").canonical)


# ---------------------------------------------------------------- the rule, for every answer

METER = get_profile("34465a").model.excitation


def _meter(answers: dict[str, str]) -> Callable[[str], Any]:
    async def query(command: str) -> str:
        return answers[command]
    return query


def _dressed(word: str, case: str, pad: str, quoted: bool) -> str:
    """A function's name as a meter might answer it: any case, padded, quoted or not."""
    word = {"lower": word.lower(), "upper": word, "title": word.title()}[case]
    return pad + (f'"{pad}{word}{pad}"' if quoted else word) + pad


ANSWERS = st.one_of(
    st.text(max_size=20),
    st.builds(_dressed, st.sampled_from([*(METER.passive if METER else ()), "RES", "TEMP"]),
              st.sampled_from(["lower", "upper", "title"]), st.sampled_from(["", " ", "\t"]),
              st.booleans()),
    st.builds(lambda a, sep, b: f'"{a}{sep}{b}"', st.sampled_from(["VOLT", "CURR", "RES"]),
              st.sampled_from([" ", ";", ",", '" "', "\n"]), st.sampled_from(["RES", "VOLT"])))


@given(ANSWERS)
def test_only_a_function_the_profile_knows_as_passive_passes(answer: str) -> None:
    """Fail closed (default deny): only an answer that is exactly one passive function (its
    case, spaces and one pair of quotes aside) passes; several words never do."""
    assert METER is not None
    found = asyncio.run(applied(METER, _meter({"FUNC?": answer, "TEMP:TRAN:TYPE?": "TC",
                                               "TEMP:TRAN:TC:CHEC?": "0"})))
    text = answer.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1].strip()
    one = text.upper() if text.isascii() and text and not any(
        c in text for c in ' \t\n\r\x0b\x0c",;') else None
    assert (found is None) == (one is not None and (one in METER.passive or one == "TEMP"))
    if one is not None and one in METER.excites:
        assert found == METER.excites[one]


@pytest.mark.parametrize("answer", ['"VOLT RES"', '"VOLT;RES"', '"VOLT","RES"', "VOLT RES",
                                    '""', "", "  ", '"', "\x00", "VOLT\x00", '"RES"'])
def test_an_answer_naming_no_single_passive_function_is_held(answer: str) -> None:
    assert METER is not None
    assert asyncio.run(applied(METER, _meter({"FUNC?": answer}))) is not None


def test_a_thermocouple_with_its_check_on_excites() -> None:
    assert METER is not None
    answers = {"FUNC?": '"TEMP"', "TEMP:TRAN:TYPE?": "TC", "TEMP:TRAN:TC:CHEC?": "1"}
    assert "thermocouple check" in str(asyncio.run(applied(METER, _meter(answers))))
    answers["TEMP:TRAN:TC:CHEC?"] = "0"
    assert asyncio.run(applied(METER, _meter(answers))) is None


def test_an_unknown_function_is_held_with_words_that_say_so() -> None:
    assert METER is not None
    found = asyncio.run(applied(METER, _meter({"FUNC?": '"NEWFUNC"'})))
    assert found is not None and "does not know it as one passive function" in found
    spec = ExcitationSpec(query="FUNC?", passive=("volt",))
    assert spec.passive == ("VOLT",)
    assert asyncio.run(applied(spec, _meter({"FUNC?": '"volt"'}))) is None
    # A CONF?-style answer names more than the function: it is not one passive function.
    assert asyncio.run(applied(spec, _meter({"FUNC?": '"VOLT +1.0E+01,+3.0E-06"'}))) is not None


@pytest.mark.parametrize(("section", "wanted"), [
    ("", "no excitation section"),
    ('excitation: {query: "*RST?"}\n', "must be a read of the profile"),
    ('excitation: {query: "FUNC?", passive: [A], excites: {A: x}}\n', "passive and as exciting"),
])
def test_an_excitation_section_is_checked(tmp_path: Any, section: str, wanted: str) -> None:
    path = tmp_path / "meter.yaml"
    path.write_text(
        "name: meter-x\ntitle: t\nkind: meter\n" + section + "commands:\n"
        "  - header: READ\n    query: {effect: read, measures: true}\n"
        "  - header: FUNCtion\n    query: {effect: read}\n", encoding="utf-8")
    with pytest.raises(ProfileError, match=wanted):
        get_profile(str(path))


def test_profile_check_finds_a_meter_trigger_without_the_rule(tmp_path: Any) -> None:
    """A meter profile whose READ?, INIT or *TRG is not ``measures: true`` would pass them
    while the function drives the DUT: ``bench-gate profile check`` says so, as an error."""
    text = (Path(__file__).parent.parent.parent / "bench_gate/profiles/34465a.yaml").read_text(
        encoding="utf-8")
    head, _, rest = text.partition("\nexcitation:\n")
    text = head + "\ncommands:" + rest.partition("\ncommands:")[2]
    # Its safe action goes too: a meter's is read back by the excitation query.
    text = text.replace("""safe_action: {command: 'ABOR;:FUNC "VOLT"'}\n""", "")
    text = text.replace(", measures: true", "").replace("name: 34465a", "name: bare-meter")
    path = tmp_path / "bare-meter.yaml"
    path.write_text(text, encoding="utf-8")
    report = check_profile(str(path))
    flagged = sorted(f.header for f in report.findings
                     if f.level is Level.ERROR and "measures: true" in f.message)
    assert flagged == ["*TRG", "INITiate[:IMMediate]", "READ", "[SENSe:]CURRent[:DC]:ZERO:AUTO",
                       "[SENSe:]RESistance:ZERO:AUTO", "[SENSe:]TEMPerature:ZERO:AUTO",
                       "[SENSe:]VOLTage[:DC]:ZERO:AUTO"]
    assert not report.ok
    assert check_profile(str(Path(__file__).parents[2] / "bench_gate/profiles/34465a.yaml")).ok
