"""The CLI (bench_gate/cli.py and _cli_*.py)."""
