"""What every part of the gateway core shares: the bench's configuration, the store, the
clock, the instruments with their lanes, this gateway's claim on its bench name, and the
event fan-out. One object, built once by :class:`~bench_gate.gateway.Gateway` and handed to
each part (intake, snapshots, takeover, executor, runs, plans, decisions).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .config import BenchConfig, ChannelLimits, InstrumentConfig
from .envelope import unbounded
from .errors import InvalidInput, NotFound
from .federation import Registry
from .identity import Identity, identities
from .identity import journaled as told
from .instruments import AsyncLink, Lane, Link, open_link
from .later import Later
from .locking import InstrumentLock, journaled
from .models import TakeoverRequest
from .notify import Notifier
from .scpi import Profile, ProfileError, Timing, Unit, get_profile
from .store import Store

__all__ = ["MAX_RETRIES", "Core", "Instrument", "Part", "new_id", "resource_key"]

#: Compare-and-swap retries before a change reports that it lost too many races.
MAX_RETRIES = 8


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


def resource_key(text: str) -> str:
    """A VISA resource in one spelling: case, spaces, board 0 (``TCPIP0`` is ``TCPIP``),
    localhost, an IPv4 address however the socket reads it (``2130706433``, ``0x7f000001``,
    ``127.1``: inet_aton's forms, no name looked up), a port's leading zeros. A spelling
    left apart here (a host name's alias) is one instrument by its ``*IDN?``."""
    parts = [p.strip() for p in text.strip().upper().split("::")]
    parts[0] = re.sub(r"^([A-Z]+)0$", r"\1", parts[0])
    if parts[0] != "TCPIP" or len(parts) < 2:
        return "::".join(parts)
    if parts[1] == "LOCALHOST":
        parts[1] = "127.0.0.1"
    elif re.fullmatch(r"[0-9A-FX.]+", parts[1]):
        with contextlib.suppress(OSError):
            parts[1] = socket.inet_ntoa(socket.inet_aton(parts[1].lower()))
    if len(parts) == 4 and parts[3] == "SOCKET" and parts[2].isdigit():
        parts[2] = str(int(parts[2]))
    return "::".join(parts)


@dataclass(slots=True)
class Instrument:
    """One instrument of this bench: its configuration, its profile, its lane, and the
    timing settings it was told (how long a reading may take, scpi._timing)."""

    config: InstrumentConfig
    profile: Profile
    lane: Lane
    timing: Timing
    #: The link's connection count the timing settings were kept on.
    opens: int | None = None
    #: What it last answered to ``*IDN?`` (serial number included): two names of the bench
    #: that answer alike are one instrument to the emergency stop (interlocks.py).
    idn: str | None = None

    @property
    def compound(self) -> bool:
        """Whether the link carries compound queries: pyvisa-sim's devices match each
        message whole (one query a message), so on its backend every field is asked alone."""
        return not self.config.backend.endswith("@sim")

    def _same_connection(self) -> None:
        # A reconnect: the instrument may have restarted or been changed meanwhile, so a
        # reading may take up to the cap until a *RST.
        link = self.lane.link
        opens = getattr(link, "opens", None)
        if self.opens and (opens != self.opens or not getattr(link, "connected", True)):
            self.timing.reset(known=False)
        self.opens = opens

    @property
    def identity(self) -> Identity:
        """Who answers ``*IDN?``, and whether the profile describes it (identity.py)."""
        if self.lane.identity is None:  # a lane made without the core's: checked all the same
            self.lane.identity = Identity(self.config.name, self.profile.name,
                                          identities(self.profile))
        return self.lane.identity

    def extra_seconds(self, unit: Unit | str) -> float:
        """How much longer than the link's timeout the instrument may take over ``unit``."""
        self._same_connection()
        return self.timing.seconds(unit)

    def ran(self, unit: Unit | str) -> None:
        """A unit the gateway sent that succeeded: keep what it set."""
        self._same_connection()
        self.timing.note(unit)


class Core:
    """The shared state of one gateway."""

    def __init__(self, config: BenchConfig, store: Store,
                 links: dict[str, Link | AsyncLink] | None, clock: Callable[[], Any]) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.instruments: dict[str, Instrument] = {}
        for ic in config.instruments:
            profile = get_profile(ic.profile)
            idle = unbounded(profile, config.envelope.get(ic.name, {}))
            if idle:  # a hard limit that bounds nothing would look enforced
                raise InvalidInput(f"envelope.{ic.name}: " + "; ".join(idle))
            link = (links or {}).get(ic.name) or open_link(ic)
            lane = Lane(ic.name, link, profile.wire if profile.addressing else None)
            # Taken by the lane before its first job on each connection (issue 17 §2).
            lane.lock = InstrumentLock(ic.name, profile.model.lock,
                                       journaled(lambda: self.store, config.bench, ic.name))
            # A profile judges only the instrument it describes (identity.py).
            lane.identity = Identity(ic.name, profile.name, identities(profile), told(
                lambda: self.store, config.bench, lambda *a, **k: self.notifier.publish(*a, **k)))
            self.instruments[ic.name] = Instrument(
                ic, profile, lane, Timing(profile, cap=ic.max_reading_s))
        #: This gateway's claim on its bench name, and the other benches' published rules.
        self.registry = Registry(store, config)
        self.notifier = Notifier(store, config.bench)
        #: Events of safe actions the store refused, journaled in order once it is back.
        self.later = Later(lambda: self.store)
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def bench(self) -> str:
        return self.config.bench

    def instrument(self, name: str) -> Instrument:
        inst = self.instruments.get(name)
        if inst is None:
            raise NotFound(f"no instrument {name!r}; this bench has "
                           f"{', '.join(self.instruments) or 'none'}")
        return inst

    def owns(self, req: TakeoverRequest) -> bool:
        """Only the gateway whose bench owns the instrument ever executes a request."""
        return req.bench in ("", self.config.bench) and req.instrument in self.instruments

    def qualified(self, instrument: str, bench: str | None = None) -> str:
        """Instrument names are per bench; the shared store keys them by bench too."""
        return f"{bench or self.config.bench}/{instrument}"

    def profile_for(self, req: TakeoverRequest) -> Profile:
        """The profile a request was judged with, also for another bench's request."""
        if self.owns(req):
            return self.instruments[req.instrument].profile
        try:
            return get_profile(str(req.handoff.get("profile") or "generic"))
        except ProfileError:
            return get_profile("generic")

    def limits(self, instrument: str) -> dict[int, ChannelLimits]:
        """The envelope of one of this bench's instruments, as configured now."""
        return self.config.envelope.get(instrument, {})

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        """Run a coroutine in the background; ``close`` waits for what is still running."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def running(self) -> list[asyncio.Task[Any]]:
        return list(self._tasks)


class Part:
    """A part of the core. It reads the shared state through ``core`` every time, so the
    whole core always sees one store, one configuration and one clock."""

    def __init__(self, core: Core) -> None:
        self.core = core

    @property
    def store(self) -> Store:
        return self.core.store

    @property
    def config(self) -> BenchConfig:
        return self.core.config

    @property
    def clock(self) -> Callable[[], Any]:
        return self.core.clock
