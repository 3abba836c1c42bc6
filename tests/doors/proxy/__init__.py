"""The raw SCPI socket door (bench_gate/proxy/), with real drivers."""
