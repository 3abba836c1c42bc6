"""The socket door, tested with real clients: pyvisa-py over TCP to a real Gateway in front of
the simulated bench. The operator decides through the Gateway API directly.

pyvisa calls block, so every client runs in a worker thread while the test's event loop
serves the gateway and plays the operator.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any, TypeVar

import pytest
import pyvisa

from bench_gate.auth import Tokens
from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.models import ApprovalKind, EventType, Principal, Status, TakeoverRequest
from bench_gate.proxy import Doors, GateOp, parse_gate, start_doors
from bench_gate.scpi import ScpiError
from tests import conftest
from tests.conftest import Clock

T = TypeVar("T")
# The socket door's fixtures live in tests/conftest.py; these names stay for the modules that
# still import them from here.
doors = conftest.doors
open_client = conftest.open_client
POLL = 0.02
POLLS = 500  # 10 s at most for anything to show up


@pytest.fixture
def rm() -> Iterator[pyvisa.ResourceManager]:
    manager = pyvisa.ResourceManager("@py")
    yield manager
    manager.close()


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    return await asyncio.to_thread(fn, *args)


async def next_pending(gw: Gateway, seen: set[str] | None = None) -> TakeoverRequest:
    """The next pending request, whole: a listed one carries only a list's handoff."""
    for _ in range(POLLS):
        for req in gw.list_requests(status=Status.PENDING):
            if seen is None or req.id not in seen:
                return gw.get_request(req.id)
        await asyncio.sleep(POLL)
    raise AssertionError("no pending request showed up")


async def until(check: Callable[[], bool]) -> None:
    for _ in range(POLLS):
        if check():
            return
        await asyncio.sleep(POLL)
    raise AssertionError("condition never became true")


def kinds(req: TakeoverRequest) -> list[ApprovalKind]:
    return list(req.required)


# ---------------------------------------------------------------------- GATE parsing
def test_gate_commands_parse_with_the_lexer() -> None:
    cmds = parse_gate('GATE:GOAL "ramp ""CH1""";:GATE:RAT "why";GATE:CONF 0.5;GATE:STAT?')
    assert [c.op for c in cmds] == [GateOp.GOAL, GateOp.RATIONALE, GateOp.CONFIDENCE,
                                    GateOp.STATUS_QUERY]
    assert cmds[0].text == 'ramp "CH1"'
    assert cmds[2].number == 0.5
    assert parse_gate("gate:token 'bg_x'")[0].op is GateOp.TOKEN


@pytest.mark.parametrize(("message", "code"), [
    ("GATE:FOO 1", -113), ("GATE:GOAL 5", -104), ("GATE:GOAL", -109),
    ("GATE:STAT? 1", -108), ("GATE:CONF 2", -222), ("GATE:GOAL \"x\";VOLT 5", -113),
    ("GATE:TOK?", -113),
])
def test_gate_errors(message: str, code: int) -> None:
    with pytest.raises(ScpiError) as info:
        parse_gate(message)
    assert info.value.code == code


# ---------------------------------------------------------------------- the door
async def test_doors_bind_free_ports_on_loopback(doors: Doors) -> None:
    assert set(doors.addresses) == {"psu", "dmm"}
    for host, port in doors.addresses.values():
        assert host == "127.0.0.1" and port > 0


async def test_queries_pass_at_once(open_client: Callable[..., Any],
                                    gateway: Gateway) -> None:
    psu = open_client()
    assert (await in_thread(psu.query, "*IDN?")).startswith("Keysight Technologies,E36312A")
    assert Decimal(await in_thread(psu.query, "MEAS:VOLT? (@1)")) == 0
    assert not gateway.list_requests(status=Status.PENDING)
    dmm = open_client("dmm")
    assert "34465A" in await in_thread(dmm.query, "*IDN?")


async def test_held_write_blocks_the_stream_until_granted(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal) -> None:
    psu = open_client()

    def script() -> str:
        psu.write("VOLT 5,(@1)")
        return str(psu.query("VOLT? (@1)"))  # waits behind the held write

    task = asyncio.ensure_future(in_thread(script))
    req = await next_pending(gateway)
    assert req.message == "VOLT 5,(@1)"
    await asyncio.sleep(0.2)
    assert not task.done(), "the query overtook the held write"
    result = await gateway.grant(req.id, olga, kinds(req), proposal_hash=req.proposal_hash)
    assert result.request.status is Status.EXECUTED
    assert Decimal(await task) == 5
    run = gateway.get_run(req.run_id)
    assert run.kind.value == "script" and run.principal == "script@127.0.0.1"


async def test_denial_shows_in_syst_err_with_notes(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal) -> None:
    psu = open_client()
    await in_thread(psu.write, "VOLT 4,(@1)")
    req = await next_pending(gateway)
    await gateway.deny(req.id, olga, "not on this DUT", proposal_hash=req.proposal_hash)

    def script() -> tuple[str, str, str]:
        return psu.query("VOLT? (@1)"), psu.query("SYST:ERR?"), psu.query("SYST:ERR?")

    volts, first, second = await in_thread(script)
    assert Decimal(volts) == 0, "a denied write wrote something"
    assert first.startswith('-203,"Command protected;')
    assert req.id in first and "not on this DUT" in first and "olga" in first
    assert second.lstrip("+").startswith('0,"No error"')


async def test_envelope_refusal_writes_nothing_and_queues_the_limit(
        open_client: Callable[..., Any], gateway: Gateway) -> None:
    psu = open_client()

    def script() -> tuple[str, str]:
        psu.write("VOLT 30,(@1)")
        return psu.query("SYST:ERR?"), psu.query("VOLT? (@1)")

    err, volts = await in_thread(script)
    assert err.startswith("-222,") and "6" in err
    assert Decimal(volts) == 0
    assert not gateway.list_requests(status=Status.PENDING)


async def test_opc_answers_only_after_the_earlier_write_is_decided(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal) -> None:
    psu = open_client()

    def script() -> str:
        psu.write("CURR 0.2,(@2)")
        return str(psu.query("*OPC?"))

    task = asyncio.ensure_future(in_thread(script))
    req = await next_pending(gateway)
    await asyncio.sleep(0.2)
    assert not task.done()
    await gateway.grant(req.id, olga, kinds(req), proposal_hash=req.proposal_hash)
    assert (await task).strip() == "1"


async def test_selection_is_per_connection(
        open_client: Callable[..., Any], front_panel: Any) -> None:
    front_panel.write("VOLT 1.5,(@1)")
    front_panel.write("VOLT 2.5,(@2)")
    a, b = open_client(), open_client()

    def script(conn: Any, channel: int) -> list[str]:
        conn.write(f"INST:NSEL {channel}")
        answers = []
        for _ in range(20):
            answers.append(conn.query("VOLT?"))
            answers.append(conn.query("INST:NSEL?"))
        return answers

    ra, rb = await asyncio.gather(in_thread(script, a, 1), in_thread(script, b, 2))
    assert {Decimal(x) for x in ra[::2]} == {Decimal("1.5")}
    assert {Decimal(x) for x in rb[::2]} == {Decimal("2.5")}
    assert {int(x) for x in ra[1::2]} == {1} and {int(x) for x in rb[1::2]} == {2}


async def test_two_scripts_writing_different_channels_never_mix(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal) -> None:
    a, b = open_client(), open_client()

    def script(conn: Any, channel: int, volts: str) -> str:
        conn.write(f"INST:NSEL {channel}")
        conn.write(f"VOLT {volts}")
        return str(conn.query("VOLT?"))

    tasks = [asyncio.ensure_future(in_thread(script, a, 1, "3")),
             asyncio.ensure_future(in_thread(script, b, 2, "7"))]
    seen: set[str] = set()
    for _ in range(2):
        req = await next_pending(gateway, seen)
        seen.add(req.id)
        assert [x.canonical for x in req.actions if x.effect == "setpoint"] in (
            ["VOLT 3.0,(@1)"], ["VOLT 7.0,(@2)"])
        await gateway.grant(req.id, olga, kinds(req), proposal_hash=req.proposal_hash)
    assert [Decimal(x) for x in await asyncio.gather(*tasks)] == [3, 7]


async def test_output_enable_without_an_approved_setpoint_is_refused(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal,
        clock: Clock, front_panel: Any) -> None:
    psu = open_client()
    await in_thread(psu.write, "OUTP ON,(@1)")
    req = await next_pending(gateway)
    assert set(req.required) == {ApprovalKind.SETPOINT, ApprovalKind.OUTPUT_ENABLE}
    result = await gateway.grant(req.id, olga, [ApprovalKind.OUTPUT_ENABLE],
                                 proposal_hash=req.proposal_hash)
    assert result.missing == [ApprovalKind.SETPOINT]
    assert "no approved setpoint" in result.message
    clock.advance(minutes=31)
    await gateway.sweep()
    err = await in_thread(psu.query, "SYST:ERR?")
    assert err.startswith("-203,") and "expired" in err and req.id in err
    assert int(front_panel.query("OUTP? (@1)")) == 0


async def test_stale_write_follows_to_its_fresh_request(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal,
        front_panel: Any) -> None:
    psu = open_client()

    def script() -> str:
        psu.write("VOLT 2,(@3)")
        return str(psu.query("VOLT? (@3)"))

    task = asyncio.ensure_future(in_thread(script))
    first = await next_pending(gateway)
    front_panel.write("VOLT 1,(@3)")  # someone at the bench changes it meanwhile
    stale = await gateway.grant(first.id, olga, kinds(first), proposal_hash=first.proposal_hash)
    assert stale.request.status is Status.STALE and stale.request.superseded_by
    fresh = gateway.get_request(stale.request.superseded_by)
    await asyncio.sleep(0.2)
    assert not task.done()
    await gateway.grant(fresh.id, olga, kinds(fresh), proposal_hash=fresh.proposal_hash)
    assert Decimal(await task) == 2


async def test_disconnect_while_pending_cancels_and_never_executes(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal,
        front_panel: Any) -> None:
    psu = open_client()
    await in_thread(psu.write, "VOLT 3,(@1)")
    req = await next_pending(gateway)
    await in_thread(psu.close)
    await until(lambda: gateway.get_request(req.id).status is Status.CANCELLED)
    final = gateway.get_request(req.id)
    assert "nothing was written" in (final.outcome or "")
    types = [e.type for e in gateway.store.journal(req.run_id, limit=1000)]
    assert EventType.TAKEOVER_CANCELLED in types
    with pytest.raises(Exception):  # noqa: B017 - any refusal: it is no longer pending
        await gateway.grant(req.id, olga, kinds(req), proposal_hash=req.proposal_hash)
    assert Decimal(front_panel.query("VOLT? (@1)")) == 0


async def test_malformed_oversized_and_binary_messages_get_errors(
        open_client: Callable[..., Any], gateway: Gateway) -> None:
    psu = open_client()

    def script() -> list[str]:
        psu.write("VOLT? (@1")  # unclosed channel list
        psu.write("X" * 20000)  # oversized
        psu.write_raw(b"\x00\xff\x80binary\r\n")
        out = [psu.query("SYST:ERR?") for _ in range(4)]
        out.append(psu.query("*IDN?"))
        return out

    first, second, third, last_err, idn = await in_thread(script)
    assert first.startswith("-1")  # a command error
    assert second.startswith("-223,")
    assert third.startswith("-101,")
    assert last_err.lstrip("+").startswith("0,")
    assert idn.startswith("Keysight")
    assert not gateway.list_requests(status=Status.PENDING)


async def test_gate_commands_on_the_wire(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal) -> None:
    _record, secret = Tokens(gateway.store).create("ramp-script", "requester")
    psu = open_client()

    def setup() -> tuple[str, str, str]:
        psu.write(f'GATE:TOK "{secret}"')
        psu.write('GATE:GOAL "characterise the LDO"')
        psu.write('GATE:RAT "step 3: 4 V into the DUT"')
        psu.write("GATE:CONF 0.9")
        return psu.query("GATE:STAT?"), psu.query("GATE:RUN?"), psu.query("GATE:GOAL?")

    status, run_id, goal = await in_thread(setup)
    assert status == 'NONE,"",""'
    assert goal == '"characterise the LDO"'
    run = gateway.get_run(run_id.strip('"'))
    assert run.principal == "ramp-script" and run.goal == "characterise the LDO"

    task = asyncio.ensure_future(in_thread(psu.write, "VOLT 4,(@1)"))
    req = await next_pending(gateway)
    await task
    assert req.rationale == "step 3: 4 V into the DUT" and req.confidence == 0.9
    status = await in_thread(psu.query, "GATE:STAT?")  # answered while the write is held
    assert status.startswith(f'PENDING,"{req.id}"') and "setpoint" in status
    await gateway.grant(req.id, olga, kinds(req), proposal_hash=req.proposal_hash)
    assert Decimal(await in_thread(psu.query, "VOLT? (@1)")) == 4
    assert (await in_thread(psu.query, "GATE:STAT?")).startswith("EXECUTED,")
    assert await in_thread(psu.query, "GATE:RAT?") == '""'  # used by that write

    psu.write('GATE:TOK "bg_wrong"')
    err = await in_thread(psu.query, "SYST:ERR?")
    assert err.startswith("-203,") and "token" in err


async def test_a_peer_not_allowed_is_turned_away(gateway: Gateway, config: BenchConfig
                                                 ) -> None:
    config.server.allowed_peers = ["10.9.8.7"]
    for ic in config.instruments:
        ic.socket_port = 0
    doors = await start_doors(gateway, Tokens(gateway.store), config)
    try:
        host, port = doors.addresses["psu"]

        def talk() -> bytes:
            with socket.create_connection((host, port), timeout=5) as s:
                try:
                    s.sendall(b"*IDN?\n")
                    return s.recv(100)
                except ConnectionResetError:  # closed with our message unread: a reset
                    return b""

        assert await in_thread(talk) == b""
    finally:
        await doors.close()


async def test_pymeasure_driver_unmodified(
        doors: Doors, gateway: Gateway, olga: Principal) -> None:
    from pymeasure.instruments.keysight import KeysightE36312A

    host, port = doors.addresses["psu"]
    supply = KeysightE36312A(f"TCPIP0::{host}::{port}::SOCKET", read_termination="\n",
                             write_termination="\n", timeout=15000)
    try:
        assert await in_thread(lambda: supply.ch_1.voltage) == 0

        def set_volts() -> None:
            supply.ch_1.voltage_setpoint = 5

        task = asyncio.ensure_future(in_thread(set_volts))
        req = await next_pending(gateway)
        assert set(req.required) == {ApprovalKind.SETPOINT}
        await gateway.grant(req.id, olga, kinds(req), proposal_hash=req.proposal_hash)
        await task
        assert await in_thread(lambda: supply.ch_1.voltage_setpoint) == 5

        def enable() -> None:
            supply.ch_1.output_enabled = True

        seen = {req.id}
        task = asyncio.ensure_future(in_thread(enable))
        req = await next_pending(gateway, seen)
        assert set(req.required) == {ApprovalKind.OUTPUT_ENABLE}  # setpoint already approved
        await gateway.grant(req.id, olga, kinds(req), proposal_hash=req.proposal_hash)
        await task
        assert await in_thread(lambda: supply.ch_1.output_enabled) is True
        assert await in_thread(lambda: supply.ch_1.voltage) == 5
    finally:
        supply.adapter.close()
