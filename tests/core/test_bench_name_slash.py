"""A bench name holding a ``/`` (``lab/3``): a stop is kept under ``<bench>/<instrument>``,
and an instrument's name has no ``/``. The restart split the key at its first ``/``, so
a stop a crash cut off (recorded, its safe action never sent) was taken for bench
``lab``'s and never finished: CH1 stayed on with the store saying stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench_gate.config import BenchConfig
from bench_gate.core import resource_key
from bench_gate.gateway import Gateway
from bench_gate.models import EventType
from bench_gate.store import SqliteStore
from tests.conftest import Clock


async def test_a_stop_cut_off_by_a_crash_is_finished_on_a_bench_named_with_a_slash(
        config: BenchConfig, db_path: Path, clock: Clock, front_panel: Any) -> None:
    cfg = config.model_copy(update={"bench": "lab/3"})
    psu = cfg.instrument("psu")
    assert psu is not None
    front_panel.write("VOLT 3,(@1)")
    front_panel.write("OUTP ON,(@1)")
    # What a crash right after the stop was recorded leaves: stopped, unfinished.
    record = {"by": "olga", "door": "api", "at": clock().isoformat(),
              "resource": resource_key(psu.resource), "idn": None}
    left = SqliteStore(db_path)
    for table in ("stops_unfinished", "stops"):
        left.kv_put(table, "lab/3/psu", record)
    left.close()
    gw = Gateway(cfg, SqliteStore(db_path), clock=clock)
    await gw.start()
    try:
        assert front_panel.query("OUTP? (@1)").strip() == "0", "the stop was never finished"
        stops = [e for e in gw.store.journal("bench:lab/3", limit=100)
                 if e.type is EventType.EMERGENCY_STOP]
        assert len(stops) == 1 and "resumed" in stops[0].data, stops
        assert "psu" in gw.stopped()
    finally:
        await gw.close()
        gw.store.close()
