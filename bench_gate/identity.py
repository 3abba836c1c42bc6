"""The identity check: a profile judges only the instrument it describes.

A profile's ``identity`` (and ``identities``: the same model under a renamed vendor, HP,
Agilent, Keysight) is the start of its instrument's ``*IDN?`` answer: manufacturer and
model. Everything the gateway knows about a message (read-only or not, its canonical form,
the state it predicts, the envelope, the safe action) comes from the profile, so knowledge
about another model is no knowledge (default deny). bench.toml may point a profile at
another instrument (a wrong resource, a swapped cable, a compatible model with other
ranges), and the instrument behind a resource may change while the gateway runs.

So the lane asks ``*IDN?`` before its first job on each new connection, and before every
job while the last answer did not fit (nothing else is sent then: the job is refused with
:class:`~bench_gate.errors.WrongInstrument`, naming what was expected and what answered).
Every snapshot reads ``*IDN?`` too (the hold, the live recheck before a write, a
read-back), and the envelope watch asks it every period: a swap on the same connection is
caught before the next write, and within a watch period for reads. Only the safe actions
that never wait skip the check (the emergency stop, a lost client's lease: a stop still
tries); the watch and a read-back never send one to an instrument that does not fit
(safety.py asks ``*IDN?`` when a field went unanswered). A profile without an identity
(``generic``) is not checked. A job that reaches a new connection in its middle (its
reads dropped one) asks ``*IDN?`` on it before its next command, and must find the very
instrument it began with, serial included (:class:`Asked`).

An identity names at least the manufacturer and the model (the profile schema refuses
fewer). An answer longer than ``answers.MAX_TEXT`` is no identification: it never fits, and
only a clipped quote of it is kept (:func:`ask` raises for the stop's and a lease's).

Fields are compared whole, ignoring case, spaces and punctuation: ``KEYSIGHT
TECHNOLOGIES,E36312A`` fits ``Keysight Technologies,E36312A``, ``…,E36312AB`` does not.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .answers import MAX_TEXT, shown
from .errors import GatewayError, InstrumentError, WrongInstrument
from .models import Event, EventType
from .scpi import Profile

if TYPE_CHECKING:
    from .instruments import AsyncLink, Lane

logger = logging.getLogger(__name__)

__all__ = ["IDN", "Asked", "Identity", "Refusing", "ask", "fits", "identities", "journaled",
           "nothing"]

IDN = "*IDN?"


def identities(profile: Profile) -> tuple[str, ...]:
    """Every identity the profile's instrument may answer with; () for any (generic)."""
    model = profile.model
    return tuple(i for i in (model.identity, *model.identities) if _fields(i))


def _fields(text: str) -> list[str]:
    """The fields of an ``*IDN?`` answer, each lower case without spaces or punctuation;
    the empty ones at its end dropped (``Keysight Technologies,`` is one field)."""
    out = [re.sub(r"[\W_]+", "", f.casefold()) for f in text.strip().strip('"').split(",")]
    while out and not out[-1]:
        out.pop()
    return out


def fits(expected: Sequence[str], idn: str) -> bool:
    """Whether ``idn`` answers as one of ``expected``: each field an identity names
    (manufacturer, model) equal to the answer's. No identities: any answer fits."""
    if not expected:
        return True
    answer = _fields(idn)
    for identity in expected:
        want = _fields(identity)
        if want and len(answer) >= len(want) and answer[:len(want)] == want:
            return True
    return False


@dataclass
class Identity:
    """Who answers behind one instrument's lane, and whether its profile describes it."""

    name: str
    profile: str
    expected: tuple[str, ...]
    #: Told when the answer starts or stops fitting (the core journals it and alerts).
    on_change: Callable[[Identity], None] | None = None
    #: What it last answered to ``*IDN?``; None before it was asked.
    seen: str | None = None
    #: Why nothing reaches it, while the last answer did not fit.
    wrong: str | None = None
    _opens: int | None = field(default=None, init=False)

    def due(self, link: Any) -> bool:
        """Whether the lane asks ``*IDN?`` before its next job: never asked on this
        connection (a new one since), or the last answer did not fit."""
        if not self.expected:
            return False
        if self.wrong is not None:
            return True
        opens = getattr(link, "opens", None)
        if opens is None:  # a link that cannot tell its connections apart: once
            return self._opens is None
        return not getattr(link, "connected", True) or opens != self._opens

    async def check(self, link: Any) -> None:
        """Ask ``*IDN?`` on ``link`` (the lane's own, on its turn) and judge the answer;
        nothing asked for a profile without an identity."""
        if not self.expected:
            return
        answer = await link.query(IDN)
        opens = getattr(link, "opens", None)
        self._opens = opens if opens is not None else -1
        self.judge(answer)

    def judge(self, idn: str) -> None:
        """Keep what answered; raise :class:`WrongInstrument` if the profile does not
        describe it."""
        if not self.expected:
            return
        idn = idn.strip()
        overlong = len(idn) > MAX_TEXT
        if overlong:  # an instrument's megabytes are no identification (answers.py): never
            idn = shown(idn)  # kept, shown, journaled or quoted whole, and never a fit
        before = self.wrong
        self.seen = idn
        error = None if not overlong and fits(self.expected, idn) else WrongInstrument(
            self.name, self.profile, self.expected, idn)
        self.wrong = error.message if error is not None else None
        if before != self.wrong and self.on_change is not None:
            try:
                self.on_change(self)
            except GatewayError as exc:  # shown all the same; never lets a job through
                logger.warning("%s: the identity was not journaled: %s", self.name,
                               exc.message)
        if error is not None:
            raise error

    def refusal(self) -> WrongInstrument | None:
        """The error every job gets while the last answer did not fit."""
        if self.wrong is None or self.seen is None:
            return None
        return WrongInstrument(self.name, self.profile, self.expected, self.seen)

    def as_dict(self) -> dict[str, Any]:
        """As shown to people (the API, the console, MCP); ``fits`` is None until the
        instrument was asked (nothing is known to fit before it answers)."""
        unknown = bool(self.expected) and self.seen is None
        return {"expected": list(self.expected), "answered": self.seen,
                "fits": None if unknown else self.wrong is None, "words": self.wrong}


def journaled(store: Callable[[], Any], bench: str, notify: Callable[..., object]
              ) -> Callable[[Identity], None]:
    """What an identity tells of a change: a journal event beside the bench's locks, and an
    alert (the answer stopped fitting, or fits again)."""
    def record(identity: Identity) -> None:
        data = {"instrument": identity.name, "expected": list(identity.expected),
                "answered": identity.seen, "fits": identity.wrong is None,
                "reason": identity.wrong, "origin": "gateway"}
        try:
            store().append([Event(run_id=f"bench:{bench}:locks",
                                  type=EventType.INSTRUMENT_IDENTITY, data=data)])
        finally:
            notify("alert", alert="wrong_instrument" if identity.wrong else "instrument_fits",
                   instrument=identity.name, reason=identity.wrong or
                   f"{identity.name} answers *IDN? as its profile describes again")
    return record


async def ask(link: Any, name: str) -> str:
    """``*IDN?`` on ``link``, stripped; an answer too long to be an identification
    (``answers.MAX_TEXT``) raises :class:`InstrumentError`, quoting it clipped."""
    answer = (await link.query(IDN)).strip()
    if len(answer) > MAX_TEXT:
        raise InstrumentError(f"{name}: {IDN!r}: answer {shown(answer)} is too long to be an "
                              "identification")
    return str(answer)


async def nothing(link: Any) -> None:
    """An empty lane job: its turn asks ``*IDN?`` first when due."""
    await asyncio.sleep(0)


class Refusing:
    """A link that sends nothing: every call raises what the lane's ``*IDN?`` found (a
    write's recheck, judged on it, refuses and records the write)."""

    def __init__(self, error: WrongInstrument) -> None:
        self.error = error

    async def write(self, command: str) -> None:
        raise self.error

    async def query(self, command: str, extra_seconds: float = 0.0) -> str:
        raise self.error

    async def close(self) -> None:
        return None


class Asked:
    """A job's link that asks who answers before a command on a connection not asked yet
    (a new one since the job began); on one where another model answers, or another unit
    than the job began on, every command is refused unsent (an InstrumentError)."""

    def __init__(self, lane: Lane, inner: AsyncLink) -> None:
        self._lane = lane
        self._inner = inner
        self._refused: int | None = None  # the connection another instrument answers on
        self._began = lane.identity.seen if lane.identity is not None else None  # that one
        self._other: InstrumentError | None = None

    @property
    def opens(self) -> int | None:
        return getattr(self._lane.link, "opens", None)

    @property
    def connected(self) -> bool:
        return bool(getattr(self._lane.link, "connected", True))

    async def _asked(self) -> None:
        identity, link = self._lane.identity, self._lane.link
        refusal: InstrumentError | None = identity.refusal() if identity is not None else None
        refusal = refusal or self._other
        if refusal is not None and self.connected and self.opens == self._refused:
            raise refusal  # asked on this connection already: another instrument
        if identity is None or not identity.due(link):
            return
        try:
            await identity.check(link)
        except WrongInstrument:
            self._refused = self.opens
            raise
        if self._began is not None and identity.seen != self._began:
            self._refused = self.opens
            self._other = InstrumentError(
                f"{self._lane.name}: the connection was reopened and another instrument "
                f"answers ({shown(identity.seen or '')}, not {shown(self._began)}): nothing "
                "more is sent on this turn")
            raise self._other

    def _due(self) -> bool:  # on every read's path: no coroutine unless it asks
        identity = self._lane.identity
        return identity is not None and (self._refused is not None
                                         or identity.due(self._lane.link))

    async def write(self, command: str) -> None:
        if self._due():
            await self._asked()
        await self._inner.write(command)

    async def query(self, command: str, extra_seconds: float = 0.0) -> str:
        if self._due():
            await self._asked()
        return await self._inner.query(command, extra_seconds)

    async def close(self) -> None:
        await self._inner.close()
