"""bench_gate/scpi/: lexing, classification, rendering, timing."""
