"""A stop that holds: while an emergency stop is in force on an instrument, every channel's
output is read each watch period, and a channel not shown off gets the profile's safe action
again at once, journaled (``stop_enforced``) and alerted.

Two things leave an output on under a stop: a person at the front panel (the remote lock
never shuts it out, and writes through the gateway are refused, not the panel), and a safe
action that failed when the stop was pressed (the instrument did not answer, a write
failed). Sent is not done: a channel that still reads on is tried again the next period, its
failure journaled once; a stop whose own safe action failed is journaled once more when a
read-back finally shows every output off. Once the stop is cleared the normal rules (the
envelope watch) apply again. Nothing here waits for a person or for the store.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from . import envelope
from .core import Core, Instrument, Part
from .errors import InstrumentError, StoreError
from .instruments import AsyncLink
from .interlocks import STOPS, Interlocks
from .lockstep import in_step_twice
from .meter_safety import make_passive, passive_now
from .models import Event, EventType
from .safety import read_off, send_safe_action

__all__ = ["STOP_WATCH_SECONDS", "Held", "StopHold"]

#: How often a stopped instrument is read when the envelope watch is off (watch_seconds 0):
#: switching the watch off never switches off a stop.
STOP_WATCH_SECONDS = 1.0


@dataclass(slots=True)
class Held:
    """One look at a stopped instrument that found an output not shown off (or showed one
    the stop could not, off at last)."""

    found: str
    sent: list[str] = field(default_factory=list)
    after: dict[str, str] = field(default_factory=dict)
    error: str | None = None


class StopHold(Part):
    def __init__(self, core: Core, interlocks: Interlocks) -> None:
        super().__init__(core)
        self.interlocks = interlocks
        #: The last failed safe action per instrument, journaled once, not every period.
        self._failing: dict[str, str] = {}

    def holds(self, inst: Instrument) -> bool:
        """Whether ``inst`` is under a stop this gateway enforces now."""
        return (inst.config.name in self.interlocks.in_force
                and (inst.profile.safe_action is not None
                     or inst.profile.meter_safe is not None)
                and self.core.registry.lost is None)  # the bench's new owner holds it

    async def look(self, link: AsyncLink, inst: Instrument) -> Held | None:
        """On the instrument's lane turn: read every channel's output; any not shown off
        (on, unread, or read out of step) gets the safe action again."""
        name, profile = inst.config.name, inst.profile
        if profile.meter_safe is not None:
            return await self._look_meter(link, inst)
        channels = list(profile.channels)
        read, unread = await read_off(link, profile, channels, inst)
        out_of_step = None
        if read:
            try:  # "off" read out of step proves nothing: every channel gets it again
                await in_step_twice(link, inst)
            except InstrumentError as exc:
                out_of_step = exc.message
        # A channel unread (one whose profile has no way to read it too) counts as on.
        on = channels if out_of_step else [
            ch for ch in channels if envelope.live_words(profile, read, [ch])]
        if not on:
            if name in self.interlocks.unproven:
                return Held(found="", after=read)
            return None
        if not self.holds(inst):  # cleared while it was read: the normal rules apply
            return None
        found = "; ".join(w for w in [envelope.live_words(profile, read, on), *unread,
                                      out_of_step] if w)
        sent, after, failed = await send_safe_action(link, profile, on, inst)
        return Held(found=found, sent=sent, after=after, error="; ".join(failed) or None)

    async def _look_meter(self, link: AsyncLink, inst: Instrument) -> Held | None:
        """A meter: its function asked (a person at its panel may select resistance); one
        not shown passive gets the safe action again."""
        name, profile = inst.config.name, inst.profile
        read, why = await passive_now(link, profile, inst)
        if why is None:
            return Held(found="", after=read) if name in self.interlocks.unproven else None
        if not self.holds(inst):  # cleared while it was read: the normal rules apply
            return None
        sent, after, failed = await make_passive(link, profile, inst)
        return Held(found=why, sent=sent, after=after, error="; ".join(failed) or None)

    def settled(self, name: str) -> None:
        """A look that found nothing to do (or could not look): a failure is news again."""
        self._failing.pop(name, None)

    def _proven(self, name: str) -> None:
        """The stop's record stops saying not shown off (a restart would say it again)."""
        key = self.core.qualified(name)
        with contextlib.suppress(StoreError):  # still said: the next look proves it again
            old = self.store.kv_get(STOPS, key)
            if old is not None and "not_shown_off" in old:
                self.store.kv_swap(STOPS, key, old,
                                   {k: v for k, v in old.items() if k != "not_shown_off"})

    def report(self, inst: Instrument, held: Held) -> None:
        """Journal and alert what ``look`` did: each safe action that worked, a failure once
        (until it changes or works), and a stop's failed safe action shown off at last."""
        name = inst.config.name
        said = f"{held.found}: {held.error}"
        if held.error is not None and self._failing.get(name) == said:
            return  # the same failure as the last look: already journaled and alerted
        if name not in self.interlocks.in_force:  # cleared while the look sent it
            self._cleared(inst, held)
            return
        if held.error is None:
            self._failing.pop(name, None)
            was = self.interlocks.unproven.pop(name, None)
        else:
            self._failing[name] = said
            self.interlocks.unproven[name] = held.error
            was = None
        safe = "it measures in a passive function" if inst.profile.meter_safe is not None \
            else "every output reads off"  # a meter's safe state is its function
        if held.error is not None:
            words = (f"{name} is stopped, but {held.found}; the safe action failed "
                     f"({held.error}): it is tried again every watch period until "
                     f"{safe}; check the bench")
        elif not held.sent:
            words = (f"{name} is stopped and {safe} now "
                     f"(the stop's own safe action had failed: {was})")
        else:
            words = (f"{name} is stopped, but {held.found}: the safe action "
                     f"({'; '.join(held.sent)}) ran again")
        data: dict[str, Any] = {"instrument": name, "found": held.found,
                                "safe_action": held.sent, "read_back": held.after,
                                "error": held.error}
        if was is not None:
            data["proven"] = f"{safe} (the stop's own safe action: {was})"
            self._proven(name)
        self.core.notifier.publish("alert", alert="stop_enforced", instrument=name,
                                   reason=words)
        with contextlib.suppress(StoreError):  # the outputs never wait for the store
            self.store.append([Event(run_id=f"bench:{self.config.bench}",
                                     type=EventType.STOP_ENFORCED, data=data)])

    def _cleared(self, inst: Instrument, held: Held) -> None:
        """A look's safe action that went out as the stop was cleared: journaled as what it
        is, never as a stop in force or one tried again (nothing holds it now)."""
        name = inst.config.name
        self._failing.pop(name, None)
        if not held.sent and held.error is None:
            return  # it read every output off: nothing was done, nothing to say
        done = f"failed ({held.error})" if held.error is not None else "ran"
        words = (f"{name}'s stop was cleared while {held.found}: the safe action "
                 f"({'; '.join(held.sent)}) {done}; the normal rules apply now")
        self.core.notifier.publish("alert", alert="stop_enforced", instrument=name,
                                   reason=words)
        with contextlib.suppress(StoreError):  # the outputs never wait for the store
            self.store.append([Event(run_id=f"bench:{self.config.bench}",
                                     type=EventType.STOP_ENFORCED,
                                     data={"instrument": name, "found": held.found,
                                           "safe_action": held.sent, "read_back": held.after,
                                           "error": held.error, "cleared": words})])
