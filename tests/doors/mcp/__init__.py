"""The MCP door (bench_gate/mcp/)."""
