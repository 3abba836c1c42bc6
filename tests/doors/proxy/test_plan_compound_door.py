"""A live plan on the socket door, attacked inside one message (the review's class): a
second unit on another channel behind ``;``, a ``:`` root reset, a common command, a
header made relative, string and block data that hide a ``;`` or a line break, CR, NUL,
non-ASCII bytes, one message split over TCP segments. None of it runs: each is refused
or held for a person, and the supply's own port shows nothing moved."""

from __future__ import annotations

import asyncio
from typing import Any

from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from bench_gate.proxy import Doors

ATTACKS = [
    b"VOLT 1,(@1)\rVOLT 1,(@2)",  # a CR inside a message: not a terminator
    b"VOLT 1,(@1)\x00;VOLT 2,(@2)",
    b"VOLT 1,(@1);\r:VOLT 2,(@2)",
    "VOLT 1,(@\uff12)".encode(),  # a fullwidth 2
    b"VOLT 3,(@1);\xc2\xa0VOLT 3,(@2)",  # a no-break space
    b"VOLT 2,(@1);*CLS;:VOLT 3,(@2)",  # a common command between units
    b"VOLT 2,(@1);*WAI;VOLT 3,(@2)",
    b"SOUR:VOLT 2,(@1);CURR 0.9,(@1)",  # relative: SOUR:CURR, above the plan's 0.5 A
    b"VOLT 2,(@1);:VOLT 3,(@2)",  # a root reset to another channel
    b'VOLT 2,(@1);DISP:TEXT "a;VOLT 3,(@2)"',  # a ';' inside string data
    b'VOLT 2,(@1);DISP:TEXT "a\r";VOLT 3,(@2)',
    b"VOLT 2,(@1);DISP:TEXT #13a;b;VOLT 3,(@2)",  # a ';' inside block data
    b"VOLT 2,(@1);DISP:TEXT #0a\nVOLT 3,(@2)",  # an indefinite block ended by LF
    b"INST:NSEL 1;VOLT 3;:INST:NSEL 2;VOLT 4",
    b"APPL CH1,3,0.5;:APPL CH2,3,0.1",
    b"VOLT 2,(@1);:OUTP:TRAC ON",
    b"VOLT 2,(@1);*RCL 1",
    b"VOLT 2,(@1);:OUTP ON,(@2)",
    b"VOLT 2,(@1);:VOLT:PROT 6,(@1)",
    b"VOLT 6,(@1)",  # outside the plan's 0 to 5 V
    b"VOLT 0.006kV,(@1)",
    b"VOLT MAX,(@1)",
]
LEVELS = ["VOLT? (@1:3)", "CURR? (@1:3)", "OUTP? (@1:3)", "VOLT:PROT? (@1:3)", "OUTP:TRAC?"]


async def test_no_compound_message_leaves_a_live_plan(
        gateway: Gateway, doors: Doors, olga: Principal, pete: Principal,
        front_panel: Any) -> None:
    host, port = doors.addresses["psu"]
    reader, writer = await asyncio.open_connection(host, port)

    async def send(data: bytes) -> None:
        writer.write(data)
        await writer.drain()

    async def line() -> str:
        return (await asyncio.wait_for(reader.readline(), 10)).decode("latin-1").strip()

    try:
        await send(b'GATE:HOLD REFUSE\nGATE:PLAN "psu",(@1),0,5,0.5,NONE,ON,1000,30\n')
        for _ in range(200):
            pending = gateway.list_requests(status=Status.PENDING)
            if pending:
                break
            await asyncio.sleep(0.05)
        tk = pending[0]
        await gateway.grant(tk.id, olga, ["setpoint"], proposal_hash=tk.proposal_hash)
        await gateway.grant(tk.id, pete, ["output_enable"], proposal_hash=tk.proposal_hash)
        # Inside the plan, split over three TCP segments: it runs.
        for piece in (b"CURR 0.5,(", b"@1);:VOL", b"T 1,(@1)\n*OPC?\n"):
            await send(piece)
            await asyncio.sleep(0.05)
        assert await line() == "1"
        await send(b"SYST:ERR?\n")
        assert (await line()).startswith("+0,")
        before = [front_panel.query(q) for q in LEVELS]
        assert before[0].startswith("+1.0")

        for attack in ATTACKS:
            await send(attack + b"\n*OPC?\n")
            assert await line() == "1", attack
            errors = []
            while True:
                await send(b"SYST:ERR?\n")
                error = await line()
                if error.startswith("+0,"):
                    break
                errors.append(error)
            assert errors, f"{attack!r} ran"
            assert all(e.startswith(("-1", "-2")) for e in errors), (attack, errors)
            assert [front_panel.query(q) for q in LEVELS] == before, attack
    finally:
        writer.close()
    plan = gateway.list_plans(gateway.list_requests(status=Status.EXECUTED)[0].run_id)[0]
    assert plan.writes_used == 2  # the two units of the split message, nothing else
