"""The envelope watch: an energized channel outside the bench's limits is found within
``policy.watch_seconds``, whoever put it there, not only at the next write's read-back.

A read-back judges the state a write leaves; it cannot see a level the instrument applies
later on its own: a timer's next group, a list's next step, a trigger, a transient, a
change at the front panel, or any effect of a command its profile does not know. The
envelope is a rule about instrument state (DESIGN.md invariant 4), so the sweeper also
re-reads every enveloped field of each instrument on its lane, as a read-back does, and
applies the profile's safe action at once to an energized channel it cannot show inside
(an unreadable output or limit counts as outside, as in a read-back). Nothing here waits
for a person. A check never holds the sweeper: it queues on the instrument's lane like
any job, one at a time per instrument. Each check first asks ``*IDN?`` (of every instrument
whose profile has an identity, enveloped or not): one answering as another model is never
acted on, and shows as such within a period (identity.py). An instrument under an
emergency stop is held instead: every output must read off (holding.py), and is read so
even with the envelope watch off.
"""

from __future__ import annotations

import time
from typing import Any

from . import envelope
from .core import Core, Instrument, Part
from .errors import GatewayError, InstrumentError, WrongInstrument
from .holding import STOP_WATCH_SECONDS, Held, StopHold
from .instruments import AsyncLink
from .models import Event, EventType
from .safety import Safed, Safety
from .scpi.compound import IDN

__all__ = ["Watch"]


class Watch(Part):
    def __init__(self, core: Core, safety: Safety, hold: StopHold) -> None:
        super().__init__(core)
        self.safety = safety
        self.hold = hold
        #: When each instrument's next check is due (monotonic seconds).
        self._due: dict[str, float] = {}
        #: Instruments whose check is queued or running now.
        self._busy: set[str] = set()
        #: The last failed safe action per instrument, journaled once, not every period.
        self._failing: dict[str, str] = {}
        #: Why each enveloped instrument could not be watched, journaled once, not every
        #: period; gone when a check reads it again.
        self.blind: dict[str, str] = {}
        self._unread: dict[str, str] = {}  # this check's reason, from its lane turn
        #: Checks done since start (each a full look at one instrument's enveloped fields).
        self.checks = 0

    def tick(self) -> None:
        """From the sweeper: start a check on every instrument whose turn has come."""
        self.core.later.tick(self.core.spawn)  # what the store refused, once it is back
        now = time.monotonic()
        for name, inst in self.core.instruments.items():
            if name in self._busy or now < self._due.get(name, 0.0):
                continue
            if self.hold.holds(inst):  # a stop holds whatever the watch's period says
                pass
            elif self.config.policy.watch_seconds <= 0:
                continue
            # One without an envelope is still asked who it is (a meter's cable moved).
            elif not self._enveloped(inst) and not inst.identity.expected:
                continue
            self._busy.add(name)
            self.core.spawn(self.check(inst))

    def _period(self, inst: Instrument) -> float:
        period = self.config.policy.watch_seconds
        return period if period > 0 or not self.hold.holds(inst) else STOP_WATCH_SECONDS

    async def check(self, inst: Instrument) -> Safed | Held | None:
        """One look at ``inst`` on its lane turn: the safe action for any energized channel
        not shown inside the envelope, or any output on under a stop. Returns what was done,
        if anything."""
        name = inst.config.name
        try:
            safed = await inst.lane.run(lambda link: self._look(link, inst))
        except (GatewayError, InstrumentError):
            safed = None  # a lane that is closing or gone: the next check looks again
        else:
            self._seen(inst, self._unread.pop(name, None))
        finally:
            self._busy.discard(name)
            self._due[name] = time.monotonic() + self._period(inst)
        self.checks += 1
        if isinstance(safed, Held):
            self.hold.report(inst, safed)
        elif safed is None:
            self._failing.pop(name, None)
            self.hold.settled(name)
        else:
            self._report(inst, safed)
        return safed

    async def _look(self, link: AsyncLink, inst: Instrument) -> Safed | Held | None:
        # An instrument that answers nothing at all is unreachable, not breached: its lane
        # counts the error, and no write reaches it until it answers (the recheck).
        # Another instrument than the profile's (a swapped cable): its readings say nothing
        # and its "safe action" is another model's; WrongInstrument: nothing is done.
        # Its answer also shows it reachable; without an identity, one field is asked.
        try:
            if inst.identity.expected:
                await inst.identity.check(link)
            if inst.lane.safe_waiting:  # a stop waits behind a slow answer: it goes first
                return None
            if self.hold.holds(inst):  # every output off, not only the enveloped ones
                return await self.hold.look(link, inst)
            limits = self.config.envelope.get(inst.config.name, {})
            if not self._enveloped(inst) or not envelope.enveloped_fields(inst.profile, limits):
                return None
            if not inst.identity.expected:
                readable = envelope.readable_fields(inst.profile, limits)
                await link.query(inst.profile.field_query(readable[0][1], readable[0][0])
                                 if readable else IDN)
        except WrongInstrument:  # nothing done, shown and journaled (identity.py)
            return None
        except InstrumentError as exc:  # unreachable, not breached: but not watched either
            self._unread[inst.config.name] = exc.message
            return None
        if inst.lane.safe_waiting:  # a stop waits behind a slow answer: it goes first
            return None
        return await self.safety.make_safe(link, inst, None)

    def _seen(self, inst: Instrument, unread: str | None) -> None:
        """Journal and alert once when an enveloped instrument stops answering the watch
        (its energized channels are then watched by nobody) and once when it answers again."""
        name = inst.config.name
        if not self._enveloped(inst) or self.blind.get(name) == unread or (
                unread is None and inst.identity.wrong is not None):
            return  # another model answering is shown as such (identity.py)
        if unread is None:
            self.blind.pop(name, None)
            reason = f"the envelope watch reads {name} again"
        else:
            self.blind[name] = unread
            reason = (f"the envelope watch cannot read {name} ({unread}): its channels are "
                      "not watched until it answers")
        self.core.notifier.publish("alert", alert="watch_blind" if unread else "watch_sees",
                                   instrument=name, reason=reason)
        self._journal(Event(run_id=f"bench:{self.config.bench}", type=EventType.WATCH_BLIND,
                            data={"instrument": name, "blind": unread is not None,
                                  "error": unread}))

    def _journal(self, event: Event) -> None:
        """Journal ``event``, or keep it for when the store is back (the safe action and the
        alert never wait for it)."""
        self.core.later.journal(event)

    def _enveloped(self, inst: Instrument) -> bool:
        return bool(self.config.envelope.get(inst.config.name)) and \
            inst.profile.safe_action is not None

    def _report(self, inst: Instrument, safed: Safed) -> None:
        name = inst.config.name
        if safed.error is not None and self._failing.get(name) == safed.error:
            return  # the same failure as the last check: already journaled and alerted
        if safed.error is None:
            self._failing.pop(name, None)
        else:
            self._failing[name] = safed.error
        words = envelope.summary(inst.profile, safed.found)
        done = (f"the safe action ({'; '.join(safed.sent)}) ran at once" if safed.error
                is None else f"the safe action failed ({safed.error})")
        data: dict[str, Any] = {
            "instrument": name, "found_by": "watch",
            "breaches": [b.as_json() for b in safed.found], "safe_action": safed.sent,
            "read_back": safed.after, "error": safed.error}
        self.core.notifier.publish(
            "alert", alert="envelope_breach", instrument=name,
            reason=f"the envelope watch found {words} on {name}; {done}")
        self._journal(Event(run_id=f"bench:{self.config.bench}",
                            type=EventType.ENVELOPE_BREACH, data=data))
