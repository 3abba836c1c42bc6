"""The sixth hostile review, through MCP: the emergency stop's words to an agent say only
what was read back (tests/core/test_review_holes_6.py has the rest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp import Client

from bench_gate.config import BenchConfig
from bench_gate.gateway import Gateway
from bench_gate.mcp import AgentSession, CoreBench, build_server
from bench_gate.models import Principal
from bench_gate.store import SqliteStore
from sim_instruments import SimBenchThread
from tests.conftest import own_port


async def test_the_stop_never_tells_an_agent_outputs_off_that_still_read_on(
        config: BenchConfig, db_path: Path, sim: SimBenchThread, front_panel: Any) -> None:
    """Another LAN client holds the E36312A's interface lock and CH3 is on at 15 V: the
    agent's ``emergency_stop`` was told "outputs off" while CH3 stayed on. It now reads
    that not every output is off, and which."""
    with own_port(sim.psu_resource_name) as other:
        assert other.query("SYST:LOCK:REQ?") == "1"
        for command in ("VOLT 15,(@3)", "CURR 0.2,(@3)", "OUTP 1,(@3)"):
            front_panel.write(command)
        config.policy.watch_seconds = 0  # the stop alone
        gw = Gateway(config, SqliteStore(db_path))
        await gw.start()
        session = AgentSession(CoreBench(gw, Principal(name="agent-1")))

        async def session_for(ctx: Any) -> AgentSession:
            return session

        try:
            async with Client(build_server(session_for)) as client:
                result = await client.call_tool("emergency_stop", {"instrument": "psu"})
        finally:
            await gw.close()
            gw.store.close()
        words = " ".join(getattr(c, "text", "") for c in result.content)
        assert "NOT every output is shown off" in words and "CH3 still reads on" in words, words
        assert int(front_panel.query("OUTP? (@3)")) == 1
        other.write("SYST:LOCK:REL")
