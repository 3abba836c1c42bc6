"""The processes a bench script starts (simulator, server, load generator) and how it waits
for them: shared by bench/flood.py and bench/http_api.py."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx

__all__ = ["free_port", "process", "wait_up"]


def free_port() -> int:
    """A port of 127.0.0.1 free a moment ago (the kernel's ephemeral choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def process(args: list[str], **kw: Any) -> Iterator[subprocess.Popen[bytes]]:
    """``args`` in its own process (stdout piped, stderr dropped), terminated on leaving."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, **kw)
    try:
        yield proc
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)


def wait_up(url: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """Poll ``url`` until it answers; fail at once if ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(url, timeout=1)
            return
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not come up")
