"""MCP in front of an instrument its profile does not describe (the E36312A's profile at a
DP832): each tool error is ``wrong_instrument``, SCPI -241, naming both identities, and
``list_instruments`` says why (bench_gate/identity.py)."""

from __future__ import annotations

from pathlib import Path

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from ..api.test_wrong_instrument_api import DP832, E36312A, dp832_state, served


async def test_mcp_tools_refuse_another_model_naming_both(tmp_path: Path) -> None:
    for h, dp832, _ in served(tmp_path):
        before = dp832_state(dp832)
        http = httpx2.AsyncClient(headers={"Authorization": h.headers["Authorization"]},
                                  timeout=httpx2.Timeout(30, read=300))
        async with http, Client(streamable_http_client(
                f"{str(h.base_url).rstrip('/')}/mcp", http_client=http),
                                read_timeout_seconds=60) as client:
            await client.call_tool("set_goal", {"goal": "CH1 up"})
            for tool, args in (
                    ("scpi_query", {"instrument": "psu", "command": "MEAS:VOLT? (@1)"}),
                    ("scpi_write", {"instrument": "psu", "command": "VOLT 2,(@1)",
                                    "rationale": "the DUT needs 2 V"}),
                    ("get_state", {"instrument": "psu"})):
                r = await client.call_tool(tool, args)
                assert r.is_error and r.structured_content is not None, (tool, r)
                found = r.structured_content
                assert found["error"] == "wrong_instrument", (tool, found)
                assert found["scpiCode"] == -241, (tool, found)
                assert E36312A in found["reason"] and DP832 in found["reason"], found
            listed = await client.call_tool("list_instruments", {})
            assert listed.structured_content is not None
            psu = next(i for i in listed.structured_content["instruments"]
                       if i["name"] == "psu")
            assert DP832 in psu["wrongInstrument"] and E36312A in psu["wrongInstrument"]
        assert dp832_state(dp832) == before
