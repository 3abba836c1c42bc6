"""bench_gate/store/ and the journal: both backends, the chain, paging."""
