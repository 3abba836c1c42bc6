"""The stop holds on every shipped profile with a safe action (bench_gate/holding.py):
while the instrument is stopped, CH1 switched on at the panel at levels inside the envelope
(the envelope watch alone leaves it on) goes off again within the watch period, journaled
``stop_enforced``; a stop with every output off writes nothing more and journals nothing.
Every check reads the simulator's own port."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench_gate.models import EventType, Principal
from tests.instruments.test_every_profile_safety import (  # noqa: F401  (fixtures)
    Bench,
    at_panel,
    bench,
    port,
    started,
    until,
)


async def test_an_output_switched_on_at_the_panel_under_a_stop_goes_off_again(
        bench: Bench, tmp_path: Path, port: Any, olga: Principal) -> None:  # noqa: F811
    gw = await started(bench.config, tmp_path / "bench.db")
    try:
        await gw.emergency_stop(olga, "test", bench.name)
        assert not any(bench.case.outputs(port))
        start = gw.watch.checks
        assert await until(lambda: gw.watch.checks >= start + 2)
        stream = f"bench:{gw.bench}"
        assert not on_ch1(gw, stream), "all off: nothing to say about CH1"
        at_panel(port, bench.case.inside)
        at_panel(port, [bench.case.over[-1]])  # output on, inside the envelope
        assert bench.case.outputs(port)[0], "the panel could not switch it on"
        assert await until(lambda: not any(bench.case.outputs(port)), 8.0)
        assert await until(lambda: bool(on_ch1(gw, stream)))
        found = on_ch1(gw, stream)
        assert found[0]["instrument"] == bench.name and found[0]["safe_action"], found
        assert "CH1" not in (found[0]["error"] or ""), found
    finally:
        await gw.close()
        gw.store.close()


def on_ch1(gw: Any, stream: str) -> list[dict[str, Any]]:
    """The ``stop_enforced`` events that found CH1 on. (The SPD3303X's CH3 reports no
    state at all: it is never shown off, so its safe action is sent every period.)"""
    return [e.data for e in gw.journal(stream, limit=1000)
            if e.type is EventType.STOP_ENFORCED and "CH1" in e.data["found"]]
