"""After a write, on the same lane turn: let the instrument settle, read it back, drain its
error queue, and apply the profile's safe action to any energized channel that cannot be
shown inside the envelope (DESIGN.md invariant 4). Nothing here waits for a person.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import envelope
from .answers import SHOWN, normalize, shown
from .core import Core, Instrument, Part
from .errors import InstrumentError, NotSent
from .handoff import snapshot_key
from .identity import ask
from .instruments import AsyncLink
from .lockstep import in_step, in_step_twice
from .meter_safety import make_passive
from .scpi import Profile, classify
from .snapshots import Snapshots

__all__ = ["SETTLE_SECONDS", "Safed", "Safety", "Written", "read_off", "send_safe_action",
           "stop_outputs"]

#: How long a restart waits for an interrupted write to finish inside the instrument.
SETTLE_SECONDS = 30.0


async def send_safe_action(link: AsyncLink, profile: Profile, channels: list[int],
                           inst: Instrument | None = None
                           ) -> tuple[list[str], dict[str, str], list[str]]:
    """The profile's safe action on each channel, every unit tried even after one fails,
    then read back (the output and its output-off states): (sent, read back, errors).
    Sent is not done: a channel read back on, or off in an output-off state that still
    holds a level (or unread), or read out of step (with ``inst``: lockstep.py), is an
    error, never reported as made safe. With ``inst``, the read-back is one state, on one
    connection; one that lost its connection midway (an instrument that restarted, maybe
    back on) is no proof: the safe action is sent once more and read back again."""
    sent: list[str] = []
    read: dict[str, str] = {}
    errors: list[str] = []
    if profile.safe_action is None:
        return sent, read, errors
    for _ in range(2 if inst is not None else 1):
        failed = await _safe_units(link, profile, channels, sent)
        read, errors, lost = await _safe_read(link, profile, channels, inst)
        if not lost:
            break
    return sent, read, failed + errors


async def _safe_units(link: AsyncLink, profile: Profile, channels: list[int],
                      sent: list[str]) -> list[str]:
    """Every unit of the safe action, on whatever connection answers (it is safe on any);
    the errors."""
    errors: list[str] = []
    safe = profile.safe_action
    assert safe is not None
    for ch in channels:
        for unit in classify(safe.command.format(ch=ch), profile.name).units:
            try:
                await link.write(unit.canonical)
                sent.append(unit.canonical)
            except InstrumentError as exc:
                errors.append(exc.message)
    return errors


async def _safe_read(link: AsyncLink, profile: Profile, channels: list[int],
                     inst: Instrument | None) -> tuple[dict[str, str], list[str], bool]:
    """The safe action's read-back, on one connection (with ``inst``): a restart midway
    would mix two states; what cannot be read there is an error. (read, errors, whether
    the connection was lost midway: a field unanswered, or another connection at its end.)"""
    where = inst.lane.connection() if inst is not None else None
    with inst.lane.one_connection() if inst is not None else contextlib.nullcontext():
        read, errors = await read_off(link, profile, channels, inst)  # nested: one block
        still = envelope.live_words(profile, read, channels)
        if still:
            errors.append(f"the safe action was sent, but {still}")
        if inst is not None and read:
            try:
                await in_step_twice(link, inst)
            except InstrumentError as exc:
                errors.append(f"the safe action was sent, but its read-back is no proof: "
                              f"{exc.message}")
    if inst is None:
        return read, errors, False
    unread = len(read) < sum(len(envelope.safe_fields(profile, ch)) for ch in channels)
    return read, errors, unread or (where is not None and inst.lane.connection() != where)


async def read_off(link: AsyncLink, profile: Profile, channels: list[int],
                   inst: Instrument | None = None) -> tuple[dict[str, str], list[str]]:
    """What the safe action is read back by on each channel (its output and output-off
    states), with ``inst`` one state on one connection: (read, errors). A field that fails
    drops the connection: the rest is unread, never the next query's answer."""
    read: dict[str, str] = {}
    errors: list[str] = []
    with inst.lane.one_connection() if inst is not None else contextlib.nullcontext():
        for ch in channels:
            for f in envelope.safe_fields(profile, ch):
                query = profile.field_query(f, ch)
                try:
                    read[snapshot_key(ch, f)] = normalize(
                        profile, f, await link.query(query), query, ch)
                except InstrumentError as exc:
                    errors.append(exc.message)
                    if inst is not None:
                        await inst.lane.drop()
    return read, errors


@dataclass(slots=True)
class Safed:
    """The safe action taken after a read-back found the envelope breached."""

    found: list[envelope.Breach]
    sent: list[str]
    after: dict[str, str] | None = None
    error: str | None = None


@dataclass(slots=True)
class Written:
    """What one write's lane turn saw: answers, errors, the read-back, a safe action."""

    answers: dict[int, str] = field(default_factory=dict)
    error: str | None = None
    after: dict[str, str] | None = None
    read_error: str | None = None
    instrument_errors: list[str] = field(default_factory=list)
    safed: Safed | None = None
    #: The state each save stored, read on the turn before it was sent ("slot 3" -> ...).
    stored: dict[str, dict[str, str]] = field(default_factory=dict)


class Safety(Part):
    def __init__(self, core: Core, snaps: Snapshots) -> None:
        super().__init__(core)
        self.snaps = snaps
        #: Told (instrument, channels) each time a breach gets the safe action, once it
        #: is sent: the standing plans over those channels end (planning.py).
        self.on_safed: list[Callable[[str, list[int]], None]] = []

    async def read_back(self, link: AsyncLink, inst: Instrument,
                        fields: list[tuple[int | None, str]], idn: str
                         ) -> tuple[dict[str, str] | None, str | None]:
        try:
            state = await self.snaps.read_state(link, inst, fields)
            await in_step(link, inst, state.idn)  # an answer out of step: no read-back
        except InstrumentError as exc:
            return None, exc.message
        if state.idn != idn:
            return None, f"another instrument answered: {shown(state.idn)}"
        return state.values, None

    @staticmethod
    async def settle(link: AsyncLink, inst: Instrument) -> str | None:
        """Wait until the instrument has finished every pending operation (IEEE 488.2
        §10.19 ``*OPC?``), asking again after each timeout, up to SETTLE_SECONDS. None when
        settled (or the profile has no ``*OPC?``), else why not."""
        if inst.profile.lookup(True, ("OPC",)) is None:
            return None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_SECONDS
        while True:
            try:
                await link.query("*OPC?")
                return None
            except InstrumentError as exc:
                if loop.time() >= deadline:
                    return f"the instrument did not settle within {SETTLE_SECONDS:.0f} s " \
                           f"({exc.message})"

    @staticmethod
    async def drain_errors(link: AsyncLink, inst: Instrument) -> list[str]:
        """The instrument's own error queue after a write (SCPI-99 §21.8 SYSTem:ERRor)."""
        errors: list[str] = []
        if inst.profile.lookup(False, ("SYSTEM", "ERROR")) is None:
            return errors
        with contextlib.suppress(InstrumentError):
            for _ in range(10):
                answer = await link.query("SYST:ERR?")
                if answer.lstrip("+").startswith("0"):
                    break
                errors.append(answer if len(answer) <= SHOWN else shown(answer))
        return errors

    @staticmethod
    async def _one_by_one(link: AsyncLink, inst: Instrument, readable: list[tuple[int, str]],
                          failed: set[tuple[int, str]]) -> tuple[dict[str, str], bool, bool]:
        """Each field but the ``failed`` asked alone, all on one connection; (what was read,
        cut short for a safe action waiting, whether the connection ended midway). A
        field that fails is added to ``failed`` and ends the read: the rest is unread."""
        after: dict[str, str] = {}
        with inst.lane.one_connection():
            for ch, f in readable:
                if (ch, f) in failed:
                    continue
                if inst.lane.safe_waiting:
                    # A slow instrument answers each field late: a stop (or a lost client's
                    # safe action) waited behind these reads for all of them. It goes next.
                    return after, True, False
                query = inst.profile.field_query(f, ch)
                try:
                    after[snapshot_key(ch, f)] = normalize(
                        inst.profile, f, await link.query(query), query, ch)
                except NotSent:  # lost before it was asked (a restart): not its fault
                    return after, False, True
                except InstrumentError:  # unread: outside; never the next one's answer
                    failed.add((ch, f))
                    await inst.lane.drop()
                    return after, False, True
        return after, False, False

    async def make_safe(self, link: AsyncLink, inst: Instrument,
                        after: dict[str, str] | None) -> Safed | None:
        """Invariant 4 after a write: an energized channel read back outside the envelope
        gets the profile's safe action at once, on the same lane turn, waiting for nobody.
        When the read-back failed, every enveloped field is read again one by one: a channel
        that cannot be shown inside (an unreadable output or limit counts as outside) is
        made safe too. One garbled answer never stops the safe action. Another model than
        the profile's (``*IDN?`` asked when a field went unanswered) gets nothing."""
        if inst.identity.wrong is not None:  # another model: its readings and "safe
            return None                      # action" are not this profile's (identity.py)
        limits = self.config.envelope.get(inst.config.name, {})
        cut_short = False
        if after is None:
            readable = envelope.readable_fields(inst.profile, limits)
            # One state, read on one connection: a field that fails (the connection
            # dropped after it) or an instrument that closed it (a restart) leaves a state
            # half read, and what the rest would answer on a new one is another state.
            # So all of it is read again on one new connection, but what failed (unread:
            # outside); ended midway again, the rest is unread too.
            failed: set[tuple[int, str]] = set()
            after, cut_short, ended = await self._one_by_one(link, inst, readable, failed)
            if ended:
                after, cut_short, _ = await self._one_by_one(link, inst, readable, failed)
            if len(after) < len(readable) and not cut_short:  # a cable moved to another model?
                with contextlib.suppress(InstrumentError):
                    await inst.identity.check(link)  # WrongInstrument: kept in ``wrong``
                if inst.identity.wrong is not None:
                    return None
        # Every limited channel is judged: a field left unread (one the profile cannot
        # read there, or one that failed) is outside, never passed over. Cut short for a
        # safe action waiting, only what was read outside: that safe action comes next.
        found = envelope.breaches(inst.profile, limits, after,
                                  set(limits) & set(inst.profile.channels))
        if cut_short:
            found = [b for b in found if b.value is not None]
        if not found:
            return None
        channels = sorted({b.channel for b in found})
        safed = Safed(found, envelope.safe_commands(inst.profile, channels))
        try:
            for command in safed.sent:
                await link.write(command)
            safe = inst.profile.safe_action
            if safe is not None:
                check = await self.snaps.read_state(link, inst, [
                    (ch, f) for ch in channels for f in envelope.safe_fields(inst.profile, ch)])
                await in_step(link, inst, check.idn)  # "off" out of step proves nothing
                safed.after = check.values
                after.update(check.values)
                # Sent is not done: a supply locked by another interface, or one that
                # ignores the command, still reads on; never reported as made safe.
                still = envelope.live_words(inst.profile, check.values, channels)
                if still:
                    safed.error = f"the safe action was sent, but {still}"
        except InstrumentError as exc:
            safed.error = exc.message
        # Then, on the same lane turn, the plans over those channels end: the safe action
        # never waits for the store (interlocks.Interlocks.or_held).
        for hook in self.on_safed:
            hook(inst.config.name, channels)
        return safed


async def stop_outputs(inst: Instrument) -> dict[str, Any]:
    """An emergency stop's safe action on every channel of ``inst``, jumping its lane's
    queue, and who answers (its other names stop too): what was sent, read back, failed."""
    profile = inst.profile
    safe = profile.safe_action
    channels = list(profile.channels)

    async def job(link: AsyncLink) -> dict[str, Any]:
        if profile.meter_safe is not None:  # a meter: a passive function (meter_safety.py)
            sent, read_back, errors = await make_passive(link, profile, inst)
        elif safe is None:
            return {"sent": [], "read_back": {}, "errors": [],
                    "note": "this instrument has no safe action in its profile"}
        else:
            sent, read_back, errors = await send_safe_action(link, profile, channels, inst)
        with contextlib.suppress(InstrumentError):  # who it is: its other names stop too
            inst.idn = await ask(link, inst.config.name)  # megabytes: none
            inst.identity.judge(inst.idn)  # shown if it is not the profile's
        return {"sent": sent, "read_back": read_back, "errors": errors}

    try:
        return await inst.lane.run(job, urgent=True)
    finally:
        inst.lane.halted = False
