"""The doors, one package each (bench_gate/api, mcp, proxy, web and the CLI)."""
