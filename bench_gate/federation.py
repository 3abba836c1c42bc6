"""Benches sharing one store: which live gateway serves each bench, and the rules it
published (its envelope and policy), so that a gateway deciding on another bench's request
decides by the owner's rules.

A gateway claims its bench name at start and renews the claim with a heartbeat. A second
live gateway with the same name refuses to start: two of them would both "own" each other's
instruments. A claim whose heartbeat stopped (or whose process is gone, on this host) is
stale and may be taken over, which is how a gateway restarts after a crash. A heartbeat and
its age are read on the store's clock, never a host's own: two hosts whose clocks disagree
by more than a claim's life would each find the other's claim stale.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from decimal import Decimal
from typing import Any

from pydantic import ValidationError

from .config import BenchConfig, ChannelLimits, PolicyConfig
from .errors import BenchTaken
from .store import Store

__all__ = ["HEARTBEAT_SECONDS", "LIVE_SECONDS", "Registry", "Rules"]

TABLE = "benches"
HEARTBEAT_SECONDS = 1.0
#: A claim not renewed for this long belongs to a gateway that is gone.
LIVE_SECONDS = 5.0

Rules = tuple[PolicyConfig, dict[str, dict[int, ChannelLimits]]]


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


class Registry:
    """This gateway's claim on its bench name, and what it knows of the others."""

    def __init__(self, store: Store, config: BenchConfig) -> None:
        self.store = store
        self.config = config
        self.instance = str(uuid.uuid4())
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self._last_beat = 0.0

    def _entry(self) -> dict[str, Any]:
        envelope = {name: {str(ch): limits.model_dump(mode="json")
                           for ch, limits in channels.items()}
                    for name, channels in self.config.envelope.items()}
        return {"instance": self.instance, "host": self.host, "pid": self.pid,
                "heartbeat": self.store.clock_seconds(),
                "rules": {"policy": self.config.policy.model_dump(mode="json"),
                          "envelope": envelope}}

    def _live(self, entry: dict[str, Any]) -> bool:
        if entry.get("host") == self.host and entry.get("pid") != self.pid and \
                _process_gone(int(entry.get("pid", 0))):
            return False
        return self.store.clock_seconds() - float(entry.get("heartbeat", 0)) < LIVE_SECONDS

    def claim(self) -> None:
        """Claim the bench name, or raise BenchTaken if a live gateway serves it."""
        bench = self.config.bench
        entry = self.store.kv_get(TABLE, bench)
        if entry is not None and entry.get("instance") != self.instance and self._live(entry):
            raise BenchTaken(
                f"bench {bench!r} is already served by a live gateway (host "
                f"{entry.get('host')!r}, pid {entry.get('pid')}); two gateways with one bench "
                "name would both own its instruments. Stop that one, or give this one "
                "another `bench` name in its bench.toml")
        self.store.kv_put(TABLE, bench, self._entry())
        self._last_beat = time.monotonic()

    def beat(self) -> None:
        """Renew the claim (at most once per HEARTBEAT_SECONDS)."""
        if time.monotonic() - self._last_beat < HEARTBEAT_SECONDS:
            return
        entry = self.store.kv_get(TABLE, self.config.bench)
        if entry is not None and entry.get("instance") != self.instance and self._live(entry):
            return  # another gateway took the name over; it serves it now
        self.store.kv_put(TABLE, self.config.bench, self._entry())
        self._last_beat = time.monotonic()

    def release(self) -> None:
        with contextlib.suppress(Exception):
            entry = self.store.kv_get(TABLE, self.config.bench)
            if entry is not None and entry.get("instance") == self.instance:
                self.store.kv_delete(TABLE, self.config.bench)

    def alive(self, bench: str) -> bool:
        entry = self.store.kv_get(TABLE, bench)
        return entry is not None and self._live(entry)

    def instance_of(self, bench: str) -> str | None:
        """The instance of the live gateway serving ``bench`` (each start is a new one),
        or None when none is."""
        if bench == self.config.bench:
            return self.instance
        entry = self.store.kv_get(TABLE, bench)
        return str(entry.get("instance")) if entry is not None and self._live(entry) else None

    def rules(self, bench: str) -> Rules | None:
        """The envelope and policy another bench published, or None if it published none."""
        entry = self.store.kv_get(TABLE, bench)
        raw = (entry or {}).get("rules")
        if not isinstance(raw, dict):
            return None
        try:
            policy = PolicyConfig.model_validate(raw.get("policy") or {})
            envelope = {name: {int(ch): ChannelLimits.model_validate(
                {k: Decimal(str(v)) if v is not None else None for k, v in limits.items()})
                for ch, limits in channels.items()}
                for name, channels in (raw.get("envelope") or {}).items()}
        except (ValidationError, ValueError, TypeError, AttributeError):
            return None
        return policy, envelope
