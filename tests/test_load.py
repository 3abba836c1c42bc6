"""The short CI version of ``bench/load.py``: socket and HTTP clients mixed on three simulated
instruments (a second PSU from a second SimBenchThread), with approved writes among them.
Zero errors, every message the simulators received whole and canonical, no interleaving on
an instrument (simulator log and journal). See docs/reliability.md section 6."""

from __future__ import annotations

from pathlib import Path

from bench.load import pct, run_load


def test_load_short(tmp_path: Path) -> None:
    res, _info = run_load(seconds=8, clients=12, tmp=tmp_path)
    assert res.errors == []
    assert len(res.socket_ms) > 100 and len(res.http_ms) > 100
    assert res.writes, "no write was approved and executed"
    assert len(res.checks) == 2
    assert pct(res.socket_ms + res.http_ms, 99) < 5000
