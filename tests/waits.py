"""Waiting in a test for what the gateway does on its own (the watch, the stop's hold, a
sweep): a bounded poll, never an unbounded loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

__all__ = ["until"]


async def until(check: Callable[[], Any], seconds: float = 10.0) -> bool:
    """Poll ``check`` every 50 ms for at most ``seconds``; whether it came true."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.05)
    return bool(check())
