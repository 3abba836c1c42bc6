"""The HTTP door (bench_gate/api/)."""
