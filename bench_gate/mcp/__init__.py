"""The MCP door: any MCP client drives the bench through the gate, with the same approvals.

- ``bench-gate mcp --url URL``: stdio, acting for ``$BENCH_GATE_TOKEN`` over the HTTP API
  (:class:`HttpBench`).
- ``/mcp`` on the main server: streamable HTTP with the bearer token, in-process on the
  gateway core (:class:`CoreBench`, :class:`McpDoor`).

The tools see only :class:`Bench`, the one small interface both implement.
"""

from ._backend import Bench, ToolFailure
from ._core import CoreBench
from ._door import McpDoor
from ._http import HttpBench
from ._server import AgentSession, build_server
from ._stdio import client_gone, serve_stdio

__all__ = ["AgentSession", "Bench", "CoreBench", "HttpBench", "McpDoor", "ToolFailure",
           "build_server", "client_gone", "serve_stdio"]
