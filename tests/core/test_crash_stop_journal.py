"""A crash before each store write of an emergency stop and of its clear, taken exactly:
the store as a SIGKILL there leaves it (a backup taken just before the write), a restart on
it, and what the journal and the simulator's own port say after. A stop is journaled once,
a clear is never lost from the journal, and a stop never ends by itself."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from bench_gate.config import BenchConfig
from bench_gate.federation import TABLE
from bench_gate.gateway import Gateway
from bench_gate.models import EventType, Principal, Status
from bench_gate.store import SqliteStore
from tests.conftest import Clock

WRITES = frozenset({"append", "kv_put", "kv_delete", "kv_swap", "save_request", "save_run",
                    "put_setpoint", "create_request", "create_run"})


class _Snapping(SqliteStore):
    """Armed, copies itself before each write: what a SIGKILL just then would leave."""

    def __init__(self, path: Path, out: Path) -> None:
        super().__init__(path)
        self.file, self.out, self.armed = path, out, False
        self.snaps: list[tuple[Path, str]] = []

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if name not in WRITES or not super().__getattribute__("armed"):
            return attr

        def snapped(*args: Any, **kw: Any) -> Any:
            copy = self.out / f"crash{len(self.snaps):02d}.db"
            with closing(sqlite3.connect(self.file)) as src, \
                    closing(sqlite3.connect(copy)) as dst:
                src.backup(dst)
            self.snaps.append((copy, f"before {name}{args[:2]!r}"[:120]))
            return attr(*args, **kw)
        return snapped


def _events(store: SqliteStore, bench: str, kind: EventType) -> list[dict[str, Any]]:
    return [e.data for e in store.journal(f"bench:{bench}", limit=1000) if e.type is kind]


async def test_a_crash_at_every_write_of_a_stop_and_its_clear(
        config: BenchConfig, db_path: Path, tmp_path: Path, clock: Clock, script: Principal,
        olga: Principal, front_panel: Any) -> None:
    """Two holes, each at one crash point. After the stop's ``emergency_stop`` event and
    before its unfinished record went, the restart ran the stop again and journaled a second
    ``emergency_stop`` ("cut off by a crash before it was done"). After the clear deleted
    the stop and before its ``stop_cleared`` event, the restart found the stop gone and no
    word of who cleared it. Now the clear is journaled first (naming the stop's ``at``) and
    a restart finishes what the journal says was done, nothing twice."""
    front_panel.write("VOLT 3,(@1)")
    front_panel.write("OUTP ON,(@1)")
    store = _Snapping(db_path, tmp_path)
    gw = Gateway(config, store, clock=clock)
    await gw.start()
    try:
        run = gw.create_run(script, "script")
        req = (await gw.submit(run.id, "psu", "VOLT 2,(@2)")).request
        assert req is not None and req.status is Status.PENDING
        store.armed = True
        await gw.emergency_stop(olga, "test", "psu")
        stopping = len(store.snaps)
        gw.clear_stop(olga, "psu")
        store.armed = False
    finally:
        await gw.close()
        store.close()
    assert len(store.snaps) >= 6, store.snaps

    holes: list[str] = []
    for i, (copy, where) in enumerate(store.snaps):
        left = SqliteStore(copy)
        try:
            left.kv_delete(TABLE, config.bench)  # the dead gateway's claim (this pid)
            kept = any(k.endswith("/psu") for k, _ in left.kv_items("stops"))
            cleared = len(_events(left, config.bench, EventType.STOP_CLEARED))
            journaled = bool(_events(left, config.bench, EventType.EMERGENCY_STOP))
        finally:
            left.close()
        front_panel.write("OUTP ON,(@1)")  # whatever the crash left at the panel
        gw = Gateway(config, SqliteStore(copy), clock=clock)
        await gw.start()
        try:
            said = f"crash {i} {where}"
            stops = _events(gw.store, config.bench, EventType.EMERGENCY_STOP)
            clears = _events(gw.store, config.bench, EventType.STOP_CLEARED)
            assert len(stops) <= 1, (said, stops)
            assert len(clears) == cleared, (said, clears)  # the restart clears nothing
            if journaled or i >= stopping:
                assert len(stops) == 1, said
            if "psu" in gw.stopped():
                assert not clears, (said, "journaled as cleared, yet still stopped")
                assert gw.get_request(req.id).status is Status.CANCELLED, said
                if not journaled:  # the stop itself was cut off: the restart finished it
                    assert front_panel.query("OUTP? (@1)").strip() == "0", said
            else:
                assert not kept or clears, (said, "the stop ended with no stop_cleared")
                if i >= stopping:
                    assert len(clears) == 1, said
            assert gw.verify_journal().intact, said
        except AssertionError as exc:  # every crash point is tried: all holes are shown
            holes.append(str(exc))
        finally:
            await gw.close()
            gw.store.close()
    assert not holes, "\n".join(holes)
