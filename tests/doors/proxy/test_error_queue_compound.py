"""The socket door's own error and status units in compound messages (docs/socket-door.md,
"The connection's errors and status"): while a gateway refusal waits in the connection's
queue, every query unit the door answers itself is answered in its place among the
instrument's answers, in any spelling and position, as one instrument would (IEEE 488.2
§8.4.1). Before the fix a compound ``SYST:ERR?;*OPC?`` went to the instrument whole, and
the client read ``+0,"No error"`` while the refusal still waited.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import pyvisa
from hypothesis import given
from hypothesis import strategies as st

from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from bench_gate.proxy import ErrorQueue, Role, StatusPlan, split_answers, status_answer, status_plan
from bench_gate.scpi import ERROR_NAMES, available_profiles, is_read_only
from tests.conftest import own_port
from tests.doors.proxy.test_proxy import in_thread, kinds, next_pending

NO_ERROR = '+0,"No error"'
#: The instrument's own answers on the default bench's simulated E36312A.
IDN = "Keysight Technologies,E36312A,MY00000001,2.1.0-1.0.4-1.12"
#: An envelope refusal: -222 sets EXE (16) in the connection's *ESR? (IEEE 488.2 §11.5.1).
REFUSED = "VOLT 99,(@1)"
EXE, EAV = 16, 4


def refused_text(client: Any) -> str:
    """What ``SYST:ERR?`` alone says after the refusal (the path that was right before)."""
    client.write(REFUSED)
    text = str(client.query("SYST:ERR?"))
    assert text.startswith("-222,") and str(client.query("SYST:ERR?")) == NO_ERROR
    assert str(client.query("*ESR?")) == str(EXE)  # reading it clears it
    return text


# (message, expected answer with E for the refusal's error text)
CASES = [
    ("SYST:ERR?;*OPC?", "E;1"),
    ("*OPC?;SYST:ERR?", "1;E"),
    ("syst:err?;:SYSTEM:ERROR:NEXT?", f"E;{NO_ERROR}"),
    (":SYST:ERR:NEXT?;*IDN?", f"E;{IDN}"),
    ("*IDN?;:syst:err?;*OPC?", f"{IDN};E;1"),
    ("*ESR?;SYST:ERR?", f"{EXE};E"),
    ("SYST:ERR?;*ESR?", f"E;{EXE}"),
    ("*ESR?;*ESR?", f"{EXE};0"),
    ("*STB?;SYST:ERR?;*STB?", f"{EAV};E;0"),
    ("SYSTem:ERRor:COUNt?;:SYST:ERR?;:SYST:ERR:COUN?", "+1;E;+0"),
    ("*CLS;SYST:ERR?;*ESR?", f"{NO_ERROR};0"),
    ("SYST:ERR?;*CLS;*ESR?;*STB?", "E;0;0"),
    ("SYST:ERR?", "E"),
]


@pytest.mark.parametrize(("message", "expected"), CASES, ids=[m for m, _ in CASES])
async def test_a_compound_query_answers_the_connections_errors_in_place(
        open_client: Callable[..., Any], message: str, expected: str) -> None:
    psu = open_client()

    def script() -> tuple[str, str, str]:
        error = refused_text(psu)
        psu.write(REFUSED)
        got = str(psu.query(message))
        return error, got, str(psu.query("SYST:ERR?;*STB?;:SYST:ERR?"))

    error, got, after = await in_thread(script)
    assert got == ";".join(error if part == "E" else part for part in expected.split(";"))
    # nothing of the connection's own is left behind, nor answered twice
    first = error if "ERR" not in message.upper() else NO_ERROR  # *ESR?;*ESR? reads none
    assert after == f"{first};0;{NO_ERROR}", after


async def test_an_instrument_error_meanwhile_is_kept_in_order(
        open_client: Callable[..., Any], front_panel: Any) -> None:
    """An error the instrument queued after the refusal, answered by the instrument to the
    compound's first SYST:ERR?, is not lost: it comes next, then +0."""
    psu = open_client()

    def script() -> tuple[str, str, str]:
        error = refused_text(psu)
        psu.write(REFUSED)
        assert str(psu.query("*OPC?")) == "1"  # the refusal is queued, then:
        front_panel.write("NOT:A:COMMAND")  # newer than the refusal, on the instrument
        count = str(psu.query("SYST:ERR:COUN?"))
        return error, count, str(psu.query(
            "SYST:ERR?;*IDN?;:SYST:ERR?;:SYST:ERR?"))

    error, count, got = await in_thread(script)
    first, idn, second, third = split_answers(got)
    assert count == "+2"
    assert (first, idn, third) == (error, IDN, NO_ERROR)
    assert second.startswith("-113,"), second


async def test_a_channel_list_is_one_answer_among_the_units(
        open_client: Callable[..., Any]) -> None:
    """``VOLT? (@1,2)`` is two canonical units but one answer (``a,b``): the door's
    SYST:ERR? still lands on its own unit, and a string answer's ``;`` splits nothing."""
    psu = open_client()

    def script() -> tuple[str, str, str]:
        volts = str(psu.query("VOLT? (@1,2)"))
        error = refused_text(psu)
        psu.write(REFUSED)
        return volts, error, str(psu.query("VOLT? (@1,2);:SYST:ERR?;:VOLT? (@1,2)"))

    volts, error, got = await in_thread(script)
    assert "," in volts and ";" in error
    assert got == f"{volts};{error};{volts}"


async def test_the_status_byte_summarises_the_connections_events_as_enabled(
        open_client: Callable[..., Any]) -> None:
    """With ``*ESE 16;*SRE 32`` (passed to the instrument, unattended), a refusal's EXE
    shows in ``*STB?`` as ESB (32) and, enabled by ``*SRE``, MSS (64), beside bit 2 (4) for
    the error waiting; reading ``*ESR?`` clears ESB and MSS, reading the error bit 2."""
    psu = open_client()

    def script() -> tuple[str, str, str]:
        psu.write("*ESE 16;*SRE 32")
        error = refused_text(psu)
        psu.write(REFUSED)
        return error, str(psu.query("*STB?;*ESR?;*STB?")), str(psu.query("SYST:ERR?;*STB?"))

    error, first, second = await in_thread(script)
    assert first == f"{EAV | 32 | 64};{EXE};{EAV}"
    assert second == f"{error};0"


async def test_the_meters_door_too(open_client: Callable[..., Any]) -> None:
    """The 34465A's door (another profile): a typo is -113, CME (32) in *ESR?."""
    dmm = open_client("dmm")

    def script() -> str:
        dmm.write("CONFF:VOLT:DC")
        return str(dmm.query("*ESR?;:SYST:ERR?;*STB?;:SYST:ERR?"))

    esr, error, stb, last = split_answers(await in_thread(script))
    assert (esr, stb, last) == ("32", "0", NO_ERROR)
    assert error.startswith('-113,"Undefined header; CONFF:VOLT:DC'), error


async def test_a_held_compound_answers_its_error_units_in_place(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal) -> None:
    """A held write with SYST:ERR? in its message: once approved and executed, the
    answer is the connection's waiting refusal, not the instrument's +0."""
    psu = open_client()
    error = await in_thread(refused_text, psu)
    await in_thread(psu.write, REFUSED)
    await in_thread(psu.write, "VOLT 2,(@1);:SYST:ERR?;*OPC?")
    task = asyncio.ensure_future(in_thread(psu.read))
    req = await next_pending(gateway)
    await gateway.grant(req.id, olga, kinds(req), proposal_hash=req.proposal_hash)
    assert await task == f"{error};1"
    last, volts = split_answers(await in_thread(psu.query, "SYST:ERR?;:VOLT? (@1)"))
    assert (last, float(volts)) == (NO_ERROR, 2)


async def test_a_refused_unit_in_the_middle_runs_nothing_and_answers_nothing(
        open_client: Callable[..., Any], sim: Any) -> None:
    """``*IDN?;VOLT 99,(@1);*ESE 16``: the whole message is refused (-222): no unit before
    or after it runs, no answer comes (a late one would show as the next answer), and the
    error queue says why, once."""
    psu = open_client(timeout=700)

    def script() -> tuple[str, str, str]:
        psu.write("*IDN?;VOLT 99,(@1);*ESE 16")
        with pytest.raises(pyvisa.errors.VisaIOError):
            psu.read()
        return str(psu.query("*OPC?")), str(psu.query("SYST:ERR?")), str(
            psu.query("SYST:ERR?;*ESR?"))

    opc, error, after = await in_thread(script)
    assert opc == "1", "a late answer to the refused message"
    assert error.startswith("-222,") and "column 12" in error, error
    assert after == f"{NO_ERROR};{EXE}"
    with own_port(sim.psu_resource_name, panel=True) as inst:
        assert str(inst.query("*ESE?")).strip() == "0"
        assert float(inst.query("VOLT? (@1)")) == 0


# --------------------------------------------------------------- every profile, every spelling
SPELLINGS = {
    Role.NEXT: ["SYST:ERR?", ":system:error?", "SYSTem:ERRor:NEXT?", "syst:err:next?"],
    Role.CODE: ["SYST:ERR:CODE?", "system:error:code:next?"],
    Role.COUNT: ["SYST:ERR:COUN?", ":SYSTEM:ERROR:COUNT?"],
    Role.ALL: ["SYST:ERR:ALL?"],
    Role.ESR: ["*ESR?", "*esr?"],
    Role.STB: ["*STB?", "*stb?"],
}


@pytest.mark.parametrize("profile", available_profiles())
def test_every_spelling_a_profile_reads_is_the_doors_in_any_position(profile: str) -> None:
    """What the door answers comes from the profile's own classification: every spelling
    of an error or status query that the profile knows as a read is the door's wherever it
    stands in the message; one it does not know is left to the core (refused or held)."""
    other = "*IDN?" if is_read_only("*IDN?", profile) else None
    for role, spellings in SPELLINGS.items():
        for unit in spellings:
            known = is_read_only(unit, profile)
            bare = unit.lstrip(":")
            inner = bare if bare.startswith("*") else ":" + bare
            messages = [unit] + ([f"{unit};{other}", f"{other};{inner};{other}",
                                  f"{other};{inner}"] if other else [])
            for message in messages:
                plan = status_plan(profile, message)
                roles = [r for r, _ in plan.units] if plan is not None else []
                assert (role in roles) == known, (profile, message, roles)
                if plan is not None:
                    assert plan.answered == message.count("?"), (profile, message)


# --------------------------------------------------------------- splitting an answer
_plain = st.text(st.sampled_from("0123456789+-.,EABCabc :"), min_size=0, max_size=12)
_quoted = st.text(st.sampled_from('ab;,"\' '), max_size=10).map(
    lambda s: '"' + s.replace('"', '""') + '"')
_block = st.binary(max_size=20).map(lambda b: b.decode("latin-1")).map(
    lambda s: f"#{len(str(len(s)))}{len(s)}{s}")
_answer = st.lists(st.one_of(_plain, _quoted, _block), min_size=1, max_size=3).map(",".join)


@given(st.lists(_answer, min_size=1, max_size=5))
def test_answers_split_at_top_level_semicolons_only(answers: list[str]) -> None:
    assert split_answers(";".join(answers)) == answers


def test_a_quoted_semicolon_is_no_separator() -> None:
    assert split_answers('-222,"Data out of range; too high";1') == [
        '-222,"Data out of range; too high"', "1"]
    assert split_answers("#15a;b;c;1") == ["#15a;b;c", "1"]


async def test_a_resend_under_refuse_answers_its_error_units_in_place(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal,
        sim: Any) -> None:
    """``GATE:HOLD REFUSE``: the held compound queues -203; once approved, its resend runs
    and its SYST:ERR? is answered with the oldest error still waiting (the -203 itself,
    not the instrument's +0), then nothing is left."""
    psu = open_client()
    message = "VOLT 2,(@1);:SYST:ERR?"

    def hold() -> None:
        psu.write("GATE:HOLD REFUSE")
        psu.write(message)

    await in_thread(hold)
    req = await next_pending(gateway)
    await gateway.grant(req.id, olga, kinds(req), proposal_hash=req.proposal_hash)

    def resend() -> tuple[str, str]:
        return str(psu.query(message)), str(psu.query("SYST:ERR?;*ESR?"))

    got, after = await in_thread(resend)
    assert got.startswith(f'-203,"Command protected; {req.id} waits for a person'), got
    assert after == f"{NO_ERROR};{EXE}"
    with own_port(sim.psu_resource_name, panel=True) as inst:
        assert float(inst.query("VOLT? (@1)")) == 2


# --------------------------------------------------------------- one queue, for all orders
_CODES = [c for c in ERROR_NAMES if -400 < c < 0][:12]
_QUERIES = [Role.NEXT, Role.CODE, Role.COUNT, Role.ALL, Role.CODE_ALL]


@given(st.lists(st.sampled_from(_CODES), max_size=6), st.lists(st.sampled_from(_CODES),
       max_size=6), st.lists(st.lists(st.sampled_from(_QUERIES), min_size=1, max_size=4),
                             max_size=6))
def test_the_merged_queue_reads_as_one_queue(mine: list[int], theirs: list[int],
                                             messages: list[list[Role]]) -> None:
    """Whatever the connection holds, whatever the instrument holds (newer), and whatever
    error queries each message strings together: the answers are those of one queue
    holding the connection's errors then the instrument's, oldest first; nothing is lost
    nor answered twice."""
    def entry(code: int) -> str:
        return f'{code},"{ERROR_NAMES[code]}"'

    queue = ErrorQueue(None, "psu", True)  # type: ignore[arg-type]
    queue.items.extend(entry(c) for c in mine)
    conn: Any = SimpleNamespace(errors=queue, instrument="psu")
    instrument = [entry(c) for c in theirs]
    model = [entry(c) for c in mine] + list(instrument)

    def ask(role: Role) -> tuple[str, str]:
        """The instrument's answer to one unit, and one queue's (the model's)."""
        codes = [e.split(",", 1)[0] for e in model]
        if role in (Role.NEXT, Role.CODE):
            got = instrument.pop(0) if instrument else NO_ERROR
            want = model.pop(0) if model else NO_ERROR
            if role is Role.CODE:
                got, want = got.split(",", 1)[0], want.split(",", 1)[0]
            return got, want
        if role is Role.COUNT:
            return f"+{len(instrument)}", f"+{len(model)}"
        which = instrument if role is Role.ALL else [e.split(",", 1)[0] for e in instrument]
        got = ",".join(which) or (NO_ERROR if role is Role.ALL else "+0")
        want = ",".join(model if role is Role.ALL else codes) or (
            NO_ERROR if role is Role.ALL else "+0")
        instrument.clear()
        model.clear()
        return got, want

    for roles in messages:
        pairs = [ask(role) for role in roles]
        response = ";".join(got for got, _ in pairs)
        plan = StatusPlan(tuple((role, True) for role in roles))
        assert asyncio.run(status_answer(conn, plan, response)) == ";".join(
            want for _, want in pairs), (mine, theirs, roles)
