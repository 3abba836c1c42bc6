"""A stop whose safe action was never shown off says so after a crash too: the stop's record
in the store keeps why (``not_shown_off``), so a restart lists it, and a clear made before
any read-back shows every output off says it in its ``stop_cleared`` event."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from bench_gate.config import BenchConfig
from bench_gate.federation import TABLE
from bench_gate.gateway import Gateway
from bench_gate.instruments import PyvisaLink
from bench_gate.models import EventType, Principal
from bench_gate.store import SqliteStore
from tests.faults import Fault, FaultLink


async def _until(check: Any, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not check():
        await asyncio.sleep(0.05)
    return bool(check())


async def _stopped_never_shown_off(config: BenchConfig, db_path: Path, olga: Principal,
                                   front_panel: Any) -> None:
    """CH1 on; the supply takes no ``OUTP 0,(@1)``; the stop; the gateway gone."""
    psu = config.instrument("psu")
    assert psu is not None
    psu.timeout_ms = 300
    front_panel.write("VOLT 1,(@1)")
    front_panel.write("OUTP 1,(@1)")
    link = FaultLink(PyvisaLink(psu), "psu")
    link.arm(Fault.WRITE_TIMEOUT, match="OUTP 0,(@1)", times=1000)
    gw = Gateway(config, SqliteStore(db_path), links={"psu": link})
    await gw.start()
    try:
        await gw.emergency_stop(olga, "test", "psu")
        assert "not_shown_off" in gw.stopped()["psu"]
    finally:
        await gw.close()
        gw.store.close()
    assert front_panel.query("OUTP? (@1)").strip() == "1"
    left = SqliteStore(db_path)
    left.kv_delete(TABLE, config.bench)  # the dead gateway's claim (this pid)
    left.close()



async def test_a_stop_never_shown_off_still_says_so_after_a_crash(
        config: BenchConfig, db_path: Path, olga: Principal, front_panel: Any) -> None:
    """The supply takes no ``OUTP 0,(@1)``: CH1 stays on under the stop, listed as not
    shown off. The gateway dies (its in-memory word of it with it) and comes back to a
    supply that answers nothing. It listed the stop as plain, and the clear's stop_cleared
    event said nothing of CH1 never shown off: the operator took the bench for safe."""
    await _stopped_never_shown_off(config, db_path, olga, front_panel)
    psu = config.instrument("psu")
    assert psu is not None
    link = FaultLink(PyvisaLink(psu), "psu")  # answers nothing now
    link.arm(Fault.READ_TIMEOUT, times=100_000)
    link.arm(Fault.WRITE_TIMEOUT, times=100_000)
    gw = Gateway(config, SqliteStore(db_path), links={"psu": link})
    await gw.start()
    try:
        start = gw.watch.checks
        assert await _until(lambda: gw.watch.checks >= start + 2)
        assert "not_shown_off" in gw.stopped()["psu"], gw.stopped()
        gw.clear_stop(olga, "psu")
        cleared = [e.data for e in gw.journal(f"bench:{gw.bench}", limit=1000)
                   if e.type is EventType.STOP_CLEARED]
        assert "psu" in cleared[-1].get("not_shown_off", {}), cleared
    finally:
        await gw.close()
        gw.store.close()
    assert front_panel.query("OUTP? (@1)").strip() == "1", "never shown off, as said"


async def test_shown_off_after_the_restart_it_is_said_once_and_no_longer_listed(
        config: BenchConfig, db_path: Path, olga: Principal, front_panel: Any) -> None:
    """The supply takes ``OUTP 0`` again after the restart: the hold switches CH1 off,
    journals it as proven, and the stop's record no longer says it was never shown off."""
    await _stopped_never_shown_off(config, db_path, olga, front_panel)
    gw = Gateway(config, SqliteStore(db_path))
    await gw.start()
    try:
        assert await _until(lambda: "not_shown_off" not in gw.stopped()["psu"])
        assert front_panel.query("OUTP? (@1)").strip() == "0"
        proven = [e.data for e in gw.journal(f"bench:{gw.bench}", limit=1000)
                  if e.type is EventType.STOP_ENFORCED and "proven" in e.data]
        assert len(proven) == 1, proven
        record = dict(gw.store.kv_items("stops"))[f"{config.bench}/psu"]
        assert "not_shown_off" not in record, record
    finally:
        await gw.close()
        gw.store.close()
