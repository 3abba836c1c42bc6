"""The emergency_stop tool over MCP's streamable HTTP while PostgreSQL is down: the door
looked the session's token up on the store for every request, and the StoreError escaped
the ASGI app (a 500 with a traceback): the agent's stop never reached the supply. An open
session's token, verified when it opened, is taken while the store is away."""

from __future__ import annotations

import asyncio
from typing import Any

from bench_gate.auth import VERIFIED_SECONDS
from tests import pg
from tests._http_bench import Bench
from tests.doors.api.test_pg_stop_outage import _on, bench, cluster, panel
from tests.doors.mcp.test_mcp import call, http_session

__all__ = ["bench", "cluster", "panel"]  # the fixtures this module uses


async def test_an_agents_stop_goes_through_mcp_while_the_store_is_down(
        bench: Bench, cluster: pg.PgCluster, panel: Any) -> None:
    async with http_session(bench, "bot") as client:
        listed = await call(client, "list_instruments")
        assert not listed.is_error, listed
        _on(panel)
        cluster.stop("immediate")
        await asyncio.sleep(VERIFIED_SECONDS + 0.2)  # no verification trusted any more
        stopped = await call(client, "emergency_stop", instrument="psu")
        assert not stopped.is_error, stopped
        assert panel.query("OUTP? (@1)").strip() == "0"
