"""An enveloped instrument the watch cannot read is watched by nobody: a person is told
once (journaled, an alert), and once more when the watch reads it again; never every
period. It answered nothing before and the watch was silent: an energized channel went
unwatched with no word to anyone."""

from __future__ import annotations

import asyncio
from typing import Any

from bench_gate.gateway import Gateway
from bench_gate.models import EventType
from tests.liar_instrument import LyingInstrument, gw, liar, lied_config

__all__ = ["gw", "liar", "lied_config"]  # the fixtures, for pytest


def _blind_events(gw: Gateway) -> list[dict[str, Any]]:
    return [e.data for e in gw.store.recent(f"bench:{gw.config.bench}", 200)
            if e.type is EventType.WATCH_BLIND]


async def test_an_instrument_the_watch_cannot_read_is_told_once_and_once_again(
        gw: Gateway, liar: LyingInstrument, front_panel: Any) -> None:
    front_panel.write("OUTP ON,(@1)")
    inst = gw.core.instrument("psu")
    alerts: list[dict[str, Any]] = []
    async with gw.core.notifier.subscribe() as queue:
        liar.late("?", 2.5, times=100_000)  # every answer after the 1 s timeout
        for _ in range(2):
            assert await gw.watch.check(inst) is None
        liar.calm()
        await asyncio.sleep(2.0)  # the late answers already on their way go by
        for _ in range(5):  # a timed-out link reconnects; reads in step again
            if await gw.watch.check(inst) is None and "psu" not in gw.watch.blind:
                break
        while not queue.empty():
            message = queue.get_nowait()
            if message.get("type") == "alert":
                alerts.append(message)
    events = _blind_events(gw)
    assert [e["blind"] for e in events] == [True, False], events
    assert "timed out" in events[0]["error"]
    assert events[1]["error"] is None
    kinds = [a["alert"] for a in alerts if a.get("instrument") == "psu"]
    assert kinds == ["watch_blind", "watch_sees"], alerts
    assert "not watched" in next(a["reason"] for a in alerts if a["alert"] == "watch_blind")
    assert "psu" not in gw.watch.blind
    assert front_panel.query("OUTP? (@1)") == "1", "unread is not breached: left as it was"
