"""The envelope watch (bench_gate/watch.py): a level nobody wrote through the gateway (a
front panel, a timer's next group, a list's next step) is made safe within
``policy.watch_seconds``, not only at the next write's read-back. Every check reads the
simulator's own port (``front_panel``), never the gateway."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from typing import Any

from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.models import EventType
from bench_gate.store import SqliteStore


def panel(front_panel: Any, query: str) -> Decimal:
    return Decimal(str(front_panel.query(query)).strip())


async def until(check: Any, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.05)
    return check()


def breaches(gateway: Gateway) -> list[dict[str, Any]]:
    return [e.data for e in gateway.journal(f"bench:{gateway.bench}", limit=1000)
            if e.type is EventType.ENVELOPE_BREACH]


async def test_a_level_set_at_the_front_panel_is_made_safe_without_any_write(
        gateway: Gateway, front_panel: Any) -> None:
    """CH3 put at 15 V (envelope 12 V) and switched on at the panel: with no request at
    all, the watch switches CH3 off, leaves CH1 (on, inside) alone, journals and alerts."""
    front_panel.write("VOLT 1,(@1)")
    front_panel.write("OUTP 1,(@1)")
    async with gateway.subscribe() as queue:
        for command in ("VOLT 15,(@3)", "CURR 0.2,(@3)", "OUTP 1,(@3)"):
            front_panel.write(command)
        assert await until(lambda: panel(front_panel, "OUTP? (@3)") == 0)
        assert await until(lambda: bool(breaches(gateway)))
        alerts = []
        while not queue.empty():
            alerts.append(queue.get_nowait())
    assert panel(front_panel, "OUTP? (@1)") == 1 and panel(front_panel, "VOLT? (@1)") == 1
    found = breaches(gateway)
    assert len(found) == 1, found
    assert found[0]["found_by"] == "watch" and found[0]["instrument"] == "psu"
    assert found[0]["safe_action"][-1] == "OUTP 0,(@3)"
    assert {"channel": 3, "field": "voltage", "value": "15.0", "limit": "12.0"} \
        in found[0]["breaches"]
    assert any(a.get("alert") == "envelope_breach" and "watch" in a.get("reason", "")
               for a in alerts), alerts


async def test_a_channel_inside_the_envelope_is_never_touched(
        gateway: Gateway, front_panel: Any) -> None:
    """The watch reads; it writes only for a breach. Over several checks an energized
    channel inside the envelope (and one outside that is off) stays exactly as it was."""
    for command in ("VOLT 5.9,(@1)", "CURR 0.9,(@1)", "OUTP 1,(@1)", "VOLT 20,(@2)"):
        front_panel.write(command)
    start = gateway.watch.checks
    assert await until(lambda: gateway.watch.checks >= start + 3)
    assert panel(front_panel, "OUTP? (@1)") == 1
    assert panel(front_panel, "VOLT? (@1)") == Decimal("5.9")
    assert panel(front_panel, "VOLT? (@2)") == 20 and panel(front_panel, "OUTP? (@2)") == 0
    assert breaches(gateway) == []


async def test_an_envelope_tightened_while_running_applies_to_what_is_on(
        gateway: Gateway, front_panel: Any) -> None:
    """The watch judges against the envelope in force now: CH1 on at 5 V, then the bench's
    CH1 limit lowered to 3 V: CH1 is switched off with no write asked."""
    front_panel.write("VOLT 5,(@1)")
    front_panel.write("OUTP 1,(@1)")
    start = gateway.watch.checks
    assert await until(lambda: gateway.watch.checks >= start + 2)
    assert panel(front_panel, "OUTP? (@1)") == 1
    limits = gateway.config.envelope["psu"][1]
    gateway.config.envelope["psu"][1] = limits.model_copy(update={"voltage": Decimal(3)})
    assert await until(lambda: panel(front_panel, "OUTP? (@1)") == 0)


async def test_watch_seconds_zero_leaves_it_to_the_next_read_back(
        config: BenchConfig, db_path: Any, front_panel: Any) -> None:
    config.policy.watch_seconds = 0
    gw = Gateway(config, SqliteStore(db_path))
    await gw.start()
    try:
        for command in ("VOLT 15,(@3)", "OUTP 1,(@3)"):
            front_panel.write(command)
        await asyncio.sleep(2.0)
        assert gw.watch.checks == 0
        assert panel(front_panel, "OUTP? (@3)") == 1
    finally:
        await gw.close()
        gw.store.close()
