"""The console (bench_gate/web/): HTTP and headless Chromium."""
