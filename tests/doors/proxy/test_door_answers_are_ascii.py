"""What the socket door says itself is 7-bit ASCII on one line (IEEE 488.2, 8.7.8: string
response data): pyvisa decodes answers as ASCII by default, so one byte over 0x7F made
``SYST:ERR?`` raise UnicodeDecodeError in the script, and a line break in an operator's
notes split one answer in two, every later answer read one behind. A byte the client sent
(``VOLT\\xff 1``) and a French denial note with a line break in it are both written as
escapes; the script reads each answer whole and the next one is its own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status

NOTES = "trop élevé pour ce DUT\nréessayez à 3 V ✋ \"merci\""


async def next_pending(gw: Gateway) -> Any:
    for _ in range(500):
        for req in gw.list_requests(status=Status.PENDING):
            return gw.get_request(req.id)
        await asyncio.sleep(0.02)
    raise AssertionError("no pending request showed up")


async def test_an_error_about_a_byte_over_0x7f_reads_in_pyvisa(
        open_client: Callable[..., Any]) -> None:
    psu = open_client()

    def script() -> tuple[str, str, str]:
        psu.write_raw(b"VOLT\xff 1,(@1)\n")
        psu.write_raw(b"GATE:GOAL \"caf\xe9\"\n")
        return psu.query("SYST:ERR?"), psu.query("SYST:ERR?"), psu.query("*IDN?")

    first, second, idn = await asyncio.to_thread(script)
    assert first.startswith("-101,") and "0xFF" in first, first
    assert second.startswith("-101,") and "0xE9" in second, second
    assert "E36312A" in idn
    assert all(" " <= c <= "~" for c in first + second)


async def test_a_denial_note_in_any_language_is_one_ascii_answer(
        open_client: Callable[..., Any], gateway: Gateway, olga: Principal) -> None:
    psu = open_client()
    await asyncio.to_thread(psu.write, "VOLT 4,(@1)")
    req = await next_pending(gateway)
    await gateway.deny(req.id, olga, NOTES, proposal_hash=req.proposal_hash)

    def script() -> tuple[str, str, str, str]:
        return (psu.query("SYST:ERR?"), psu.query("SYST:ERR?"), psu.query("GATE:STAT?"),
                psu.query("*IDN?"))

    first, second, status, idn = await asyncio.to_thread(script)
    assert first.startswith('-203,"Command protected;') and req.id in first, first
    assert first.endswith('"') and '""merci""' in first, first  # one whole string
    assert "\\xe9" in first and "\\x0a" in first and "\\u270b" in first, first
    assert all(" " <= c <= "~" for c in first), first
    assert second.lstrip("+").startswith('0,"No error"'), second
    assert status.startswith("DENIED,") and all(" " <= c <= "~" for c in status), status
    assert "E36312A" in idn, idn


async def test_any_bytes_then_syst_err_is_one_ascii_line_and_the_next_answer_its_own(
        doors: Any) -> None:
    """Hypothesis: a message of any bytes (no line end inside), then ``SYST:ERR?`` and
    ``*IDN?`` on the same connection: the error is one line of printable ASCII and the
    identity comes next, whatever the bytes were."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    host, port = doors.addresses["psu"]
    loop = asyncio.get_running_loop()
    junk = st.binary(min_size=1, max_size=200).map(
        lambda b: b.replace(b"\n", b" ").replace(b"\r", b" ").replace(b"?", b"!"))

    def one(message: bytes) -> tuple[bytes, bytes]:
        async def go() -> tuple[bytes, bytes]:
            reader, writer = await asyncio.open_connection(host, port)
            try:
                # A write that parses is refused at once (-203), never waited on.
                writer.write(b"GATE:HOLD REFUSE\nVOLT " + message + b"\nSYST:ERR?\n*IDN?\n")
                await writer.drain()
                error = await asyncio.wait_for(reader.readline(), 10)
                idn = await asyncio.wait_for(reader.readline(), 10)
                return error, idn
            finally:
                writer.close()
        return asyncio.run_coroutine_threadsafe(go(), loop).result(30)

    @settings(max_examples=40, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(message=junk)
    def check(message: bytes) -> None:
        error, idn = one(message)
        assert error.endswith(b"\n") and all(0x20 <= b <= 0x7E for b in error[:-1]), error
        assert b"E36312A" in idn, (message, error, idn)

    await asyncio.to_thread(check)
