"""IEEE 488.2 status commands through the doors (docs/scpi.md, "IEEE 488.2 status commands").

``*OPC``, ``*WAI``, ``*ESE`` and ``*SRE`` pass unattended. ``*CLS`` clears only the
sending connection's own error view: it never reaches the instrument, whose error queue
every client shares. Checked on the simulator's own port.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench_gate.gateway import Gateway
from bench_gate.models import Principal
from tests.doors.proxy.test_proxy import in_thread


async def test_cls_through_the_socket_door_never_clears_the_instruments_queue(
        open_client: Callable[..., Any], front_panel: Any) -> None:
    front_panel.write("NOT:A:COMMAND")  # another client's error, on the instrument
    script = open_client("psu")

    def clear() -> str:
        script.write("*CLS")
        return str(script.query("*OPC?"))

    assert (await in_thread(clear)).strip() == "1"
    theirs = str(front_panel.query("SYST:ERR?"))
    assert theirs.startswith("-113"), "the other client's error is still there"


async def test_cls_clears_the_connections_own_errors(open_client: Callable[..., Any]) -> None:
    script = open_client("psu")

    def refused_then_cleared() -> tuple[str, str]:
        script.write("VOLT 99,(@1)")  # refused by the gateway: this connection's error
        script.write("*CLS")
        first = str(script.query("SYST:ERR?"))
        script.write("VOLT 99,(@1)")
        return first, str(script.query("SYST:ERR?"))

    cleared, kept = await in_thread(refused_then_cleared)
    assert cleared.lstrip("+").startswith("0"), cleared
    assert kept.startswith("-222"), kept


async def test_status_commands_pass_unattended(gateway: Gateway, script: Principal,
                                               front_panel: Any) -> None:
    run = gateway.create_run(script, "script")
    for message in ("*OPC", "*WAI", "*ESE 16", "*SRE 32", "*CLS"):
        result = await gateway.submit(run.id, "psu", message)
        assert result.status == "executed", (message, result.reason)
    assert str(front_panel.query("*ESE?")).strip() == "16"
    assert str(front_panel.query("*SRE?")).strip() == "32"


async def test_a_gone_clients_queued_writes_never_run(
        doors: Any, gateway: Any, front_panel: Any) -> None:
    """A held write, then an unattended one queued behind it, then the client leaves: the
    held one is cancelled and the queued one never runs (nobody is there any more)."""
    import asyncio

    from bench_gate.models import Status

    host, port = doors.addresses["psu"]
    _, writer = await asyncio.open_connection(host, port)
    writer.write(b"VOLT 5.9,(@1)\n*ESE 16\n")
    await writer.drain()
    for _ in range(100):
        if gateway.list_requests(status=Status.PENDING):
            break
        await asyncio.sleep(0.05)
    writer.close()
    await writer.wait_closed()
    for _ in range(100):
        if not gateway.list_requests(status=Status.PENDING):
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    assert str(front_panel.query("*ESE?")).strip() == "0"
    assert float(front_panel.query("VOLT? (@1)")) == 0


async def test_the_journal_tells_the_gateways_own_commands_from_the_clients(
        open_client: Callable[..., Any], gateway: Gateway) -> None:
    script = open_client("psu")

    def refused() -> str:
        script.write("VOLT 99,(@1)")  # refused: the door drains the instrument's errors
        return str(script.query("GATE:RUN?")).strip('"')

    run_id = await in_thread(refused)
    received = [e.data for e in gateway.store.journal(run_id, limit=100)
                if e.type.value == "command_received"]
    assert {"VOLT 99,(@1)": "client", "SYST:ERR?": "gateway"}.items() <= {
        d["message"]: d["origin"] for d in received}.items()
