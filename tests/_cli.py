"""The `bench-gate` command line for tests: in this process (``main(argv)``, the same entry
point the installed script calls), or as the real executable in its own process.

A subprocess costs an interpreter start and every import (about a second on a loaded 2-core
machine); in-process, a command costs only its work. Each command family keeps at least one
test through the real executable (``real=True``), which proves the entry point, the exit
code as the shell sees it, and the output streams."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys

from bench_gate.cli import main

__all__ = ["cli"]


def cli(*args: str, real: bool = False, timeout: float = 60,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``bench-gate ARGS``: its exit code, stdout and stderr, as ``subprocess.run`` gives
    them. ``real`` runs ``python -m bench_gate.cli`` in its own process; ``env`` (only with
    ``real``) replaces the child's environment."""
    if real:
        return subprocess.run([sys.executable, "-m", "bench_gate.cli", *args],
                              capture_output=True, text=True, timeout=timeout,
                              env=env if env is not None else {**os.environ})
    if env is not None:
        raise ValueError("env= needs real=True: an in-process command shares os.environ")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's usage errors and --help
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return subprocess.CompletedProcess(["bench-gate", *args], code, out.getvalue(),
                                       err.getvalue())
