"""The instrument lock: nothing reaches an instrument around the gate (issue 17, section 2).

A profile's ``lock`` section says how its instrument is locked to one interface (Keysight
``SYST:LOCK:REQ?``). The lane takes the lock on its own connection before the first job,
and again before the next job whenever the link has opened a new connection (a reconnect):
the lock goes with the connection that took it, on the instrument's side. Everything the
gateway does (reads, the live recheck, writes, read-backs, the safe action) goes through
that one connection, so the lock never gets in its way; another interface may still query
the instrument but gets an error for any write.

The lock commands are the gateway's own: they never come from a client's request (the
profile forbids them to clients), and each take is journaled with origin "gateway".
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .errors import GatewayError, InstrumentError
from .models import Event, EventType, now
from .scpi._lock import LockSpec

logger = logging.getLogger(__name__)

__all__ = ["UNLOCKED_WARNING", "InstrumentLock", "LockState", "LockStatus", "journaled",
           "keep_locks", "take_locks"]

#: Shown wherever an instrument is listed, whenever the gateway does not hold its lock.
UNLOCKED_WARNING = "other clients on the LAN can change this instrument without approval"
#: A request refused on a new connection may meet the old connection's lock on its way out
#: (a restart): asked again this many times, this far apart, before it counts as refused.
REQUEST_TRIES = 3
REQUEST_PAUSE = 0.1
#: How long a refused (or failed) lock waits before the lane asks again.
RETRY_SECONDS = 10.0


class LockStatus(enum.StrEnum):
    LOCKED = "locked"
    NOT_LOCKABLE = "not lockable"
    REFUSED = "refused"  # another interface holds it
    FAILED = "failed"  # the request got no (usable) answer
    PENDING = "not taken yet"  # before the first connection


@dataclass(frozen=True, slots=True)
class LockState:
    """What the gateway knows about one instrument's lock, as shown to people."""

    status: LockStatus
    owner: str | None = None
    detail: str = ""
    at: datetime | None = None

    @property
    def locked(self) -> bool:
        return self.status is LockStatus.LOCKED

    @property
    def words(self) -> str:
        """``locked``, ``not lockable``, ``lock refused: held by LAN2``..."""
        if self.status is LockStatus.REFUSED:
            return f"lock refused: held by {self.owner or 'another interface'}"
        if self.status is LockStatus.FAILED:
            return f"lock failed: {self.detail}"
        return self.status.value

    @property
    def warning(self) -> str | None:
        """Never hidden: None only while the gateway holds the lock."""
        return None if self.locked else UNLOCKED_WARNING

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status.value, "locked": self.locked, "words": self.words,
                "owner": self.owner, "warning": self.warning,
                "at": self.at.isoformat() if self.at else None}


def _granted(answer: str) -> bool:
    try:
        return int(float(answer.strip())) == 1
    except ValueError as exc:
        raise InstrumentError(f"the lock request answered {answer!r}, not 1 or 0") from exc


@dataclass
class InstrumentLock:
    """The lock of one instrument, taken on its lane's turn (:meth:`due`, :meth:`take`)."""

    name: str
    spec: LockSpec | None
    #: Told of every take (the core journals it, origin "gateway").
    on_take: Callable[[LockState, list[str]], None] | None = None
    state: LockState = field(init=False)
    #: A take the sweeper started is under way (never two at once).
    taking: bool = field(default=False, init=False)
    _opens: int | None = field(default=None, init=False)
    _retry_at: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self.state = LockState(LockStatus.PENDING if self.spec else LockStatus.NOT_LOCKABLE)

    def due(self, link: Any) -> bool:
        """Whether the lane takes the lock before its next job: never taken on this
        connection (a new one since), or refused or failed a while ago."""
        if self.spec is None:
            return False
        if self.state.status is LockStatus.FAILED:  # no answer: not on every job
            return time.monotonic() >= self._retry_at
        fresh = self._fresh(link)
        if self.state.status is LockStatus.REFUSED:
            return fresh or time.monotonic() >= self._retry_at
        return fresh

    def _fresh(self, link: Any) -> bool:
        opens = getattr(link, "opens", None)
        if opens is None:  # a link that cannot tell its connections apart: once
            return self._opens is None
        return not getattr(link, "connected", True) or opens != self._opens

    async def take(self, link: Any) -> LockState:
        """Ask for the lock on ``link``'s connection (opening it), and record the answer.
        Never raises: a lock that cannot be taken is shown, the job goes on."""
        assert self.spec is not None
        sent: list[str] = []
        fresh = self._fresh(link)
        tries = REQUEST_TRIES if fresh else 1
        try:
            for attempt in range(tries):
                sent.append(self.spec.request)
                if _granted(await link.query(self.spec.request)):
                    state = LockState(LockStatus.LOCKED, at=now())
                    break
                if attempt + 1 < tries:
                    await asyncio.sleep(REQUEST_PAUSE)
            else:
                owner = None
                if self.spec.owner is not None:
                    sent.append(self.spec.owner)
                    owner = (await link.query(self.spec.owner)).strip().strip('"') or None
                state = LockState(LockStatus.REFUSED, owner=owner, at=now())
        except InstrumentError as exc:
            state = LockState(LockStatus.FAILED, detail=exc.message, at=now())
        opens = getattr(link, "opens", None)
        self._opens = opens if opens is not None else -1  # -1: a link that cannot tell
        self._retry_at = time.monotonic() + RETRY_SECONDS
        before, self.state = self.state, state
        # Journaled on a new connection, or when the answer changed (not every retry).
        if self.on_take is not None and (fresh or (before.status, before.owner, before.detail)
                                         != (state.status, state.owner, state.detail)):
            try:  # on a worker thread: a slow or locked store never stalls the loop
                await asyncio.to_thread(self.on_take, state, sent)
            except GatewayError as exc:  # never raises: the take is shown all the same
                logger.warning("%s: the lock's take was not journaled: %s", self.name,
                               exc.message)
        return state


def journaled(store: Callable[[], Any], bench: str, instrument: str
              ) -> Callable[[LockState, list[str]], None]:
    """What a lock tells of each take: a journal event of the bench's locks (a key of its
    own, beside the bench-wide stops), origin "gateway": the commands are the gateway's own,
    never a client's."""
    def record(state: LockState, sent: list[str]) -> None:
        store().append([Event(run_id=f"bench:{bench}:locks", type=EventType.INSTRUMENT_LOCK, data={
            "instrument": instrument, "status": state.status.value, "words": state.words,
            "owner": state.owner, "detail": state.detail, "sent": sent, "origin": "gateway"})])
    return record


async def _nothing(link: Any) -> None:
    return None


def keep_locks(lanes: list[Any], spawn: Callable[[Any], object]) -> None:
    """From the sweeper: a lane whose connection dropped takes its lock again now, not at
    its next job, so the time another interface could take the lock in stays short (one
    sweep); a refused or failed lock is asked again when it is due (:meth:`InstrumentLock.due`)."""
    for lane in lanes:
        lock = lane.lock
        if lock is not None and not lock.taking and lock.due(lane.link):
            lock.taking = True
            spawn(_keep(lane, lock))


async def _keep(lane: Any, lock: InstrumentLock) -> None:
    try:
        await take_locks([lane])
    finally:
        lock.taking = False


async def take_locks(lanes: list[Any]) -> None:
    """At start: each lockable instrument's lock, taken on its lane's turn (the lane takes
    it before an empty job). An instrument that does not answer is shown as such."""
    for lane in lanes:
        if lane.lock is not None and lane.lock.spec is not None:
            try:
                await lane.run(_nothing)
            except InstrumentError:
                pass  # the lock's state says what went wrong
