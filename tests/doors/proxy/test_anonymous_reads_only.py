"""``socket_door.anonymous = "read"``: a socket-door connection that sent no token may read,
and nothing a person would decide is taken from it: a write (any spelling), a plan, a reading
held for a person. Whoever approves a write then knows who asked for it; an operator cannot
pass her own write through an anonymous connection and approve it herself. A connection
that presents its token first writes as before, and the default bench takes both."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from bench_gate.auth import Tokens
from bench_gate.gateway import Gateway
from bench_gate.models import EventType, Status
from tests.core.test_lists_and_readings import meter_panel
from tests.doors.proxy.test_proxy import doors, in_thread, next_pending, open_client

__all__ = ["doors", "meter_panel", "open_client"]


@pytest.mark.parametrize("message", ["VOLT 1,(@1)", "sour:volt 1,(@1)", "OUTP ON,(@1)",
                                     "*RST", "*IDN?;:CURR 0.2,(@1)", "GATE:PLAN"])
async def test_an_anonymous_connection_may_only_read(
        open_client: Callable[..., Any], gateway: Gateway, front_panel: Any,
        message: str) -> None:
    gateway.config.socket_door.anonymous = "read"
    psu = open_client()
    if message == "GATE:PLAN":
        message = 'GATE:PLAN "psu",(@1),0,5,0.5,NONE,OFF,40,30'

    def script() -> tuple[str, str, str, str]:
        idn = psu.query("*IDN?")  # reads pass
        volts = psu.query("VOLT? (@1)")
        psu.write(message)
        return idn, volts, psu.query("SYST:ERR?"), psu.query("GATE:RUN?")

    idn, volts, error, run_id = await in_thread(script)
    assert idn.startswith("Keysight") and Decimal(volts) == Decimal(front_panel.query(
        "VOLT? (@1)"))
    assert error.startswith("-203,") and "GATE:TOK" in error, error
    assert not gateway.list_requests(status=Status.PENDING)  # nothing for a person to pass
    assert front_panel.query("OUTP? (@1)").strip() == "0"
    assert Decimal(front_panel.query("VOLT? (@1)")) == Decimal(volts)
    run = gateway.get_run(run_id.strip().strip('"'))
    assert run.principal.startswith("script@") and not gateway.list_plans(run.id)
    if not message.startswith("GATE:"):
        refused = [e for e in gateway.journal(run.id) if e.type is EventType.WRITE_REFUSED]
        assert refused and "GATE:TOK" in refused[-1].data["reason"]


async def test_a_held_reading_is_not_taken_from_an_anonymous_connection(
        open_client: Callable[..., Any], gateway: Gateway, meter_panel: Any) -> None:
    """A reading that would drive a test current into the DUT (the meter set to resistance
    at its panel) is held for a person: with ``anonymous = "read"`` it is refused instead."""
    gateway.config.socket_door.anonymous = "read"
    dmm = open_client("dmm", timeout=3000)
    assert await in_thread(dmm.query, "READ?")  # a passive function: the reading passes
    meter_panel.write('FUNC "RES"')

    def script() -> str:
        dmm.write("READ?")  # held for a person on a bench that takes anonymous writes;
        return dmm.query("SYST:ERR?")  # refused, a query gets no answer (its error here)

    error = await in_thread(script)
    assert error.startswith("-203,") and "GATE:TOK" in error, error
    assert not gateway.list_requests(status=Status.PENDING)


async def test_a_connection_with_its_token_writes_and_the_default_takes_both(
        open_client: Callable[..., Any], gateway: Gateway) -> None:
    gateway.config.socket_door.anonymous = "read"
    _record, secret = Tokens(gateway.store).create("ramp-script", "requester")
    psu = open_client()
    psu.write(f'GATE:TOK "{secret}"')
    task = asyncio.ensure_future(in_thread(psu.write, "VOLT 1,(@1)"))
    req = await next_pending(gateway)
    await task
    assert gateway.get_run(req.run_id).principal == "ramp-script"
    gateway.config.socket_door.anonymous = "read-write"  # the default: held as before
    other = open_client()
    task = asyncio.ensure_future(in_thread(other.write, "VOLT 2,(@1)"))
    held = await next_pending(gateway, {req.id})
    await task
    assert gateway.get_run(held.run_id).principal.startswith("script@")
