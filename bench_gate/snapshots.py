"""Snapshots: the live state a proposal is judged against. Which fields a set of actions
depends on, reading them on the lane (fresh queries, ``*IDN?`` first), the actions of a
classified message with their old and new values, the state they predict, and the envelope
checked on that predicted state before anything is sent.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

from . import couplings, envelope
from .answers import MAX_TEXT, normalize, shown
from .core import Core, Instrument, Part
from .errors import InstrumentError, Refused
from .handoff import describe, snapshot_key
from .identity import fits
from .instruments import AsyncLink
from .memories import Memories, memory_of, predicted
from .models import Action, Snapshot, TakeoverRequest
from .policy import approval_for, unpredictable
from .recalls import JUDGED_STATES, judge_recalls
from .scpi import (
    Classification,
    Profile,
    ScpiError,
    Unit,
    classify,
    format_number,
    render_value,
)
from .scpi.compound import IDN, CompoundAnswerError, read_plan

__all__ = ["JUDGED_STATES", "Snapshots", "normalize", "unverifiable"]

def _identified(name: str, idn: str) -> None:
    """An identification too long to be one (a broken or hostile instrument) is no answer."""
    if len(idn) > MAX_TEXT:
        raise InstrumentError(f"{name}: {IDN!r}: answer {shown(idn)} is too long to be an "
                              "identification")


def _stored_follow(profile: Profile, before: dict[str, str], after: dict[str, str]
                   ) -> dict[str, str]:
    """``after`` with each unprogrammed stored level (``FieldSpec.follows``: equal to its
    field in ``before``) moved with its field, however that moved (a coupling included)."""
    out = dict(after)
    for key, value in after.items():
        if before.get(key) == value or "." not in key:
            continue
        head, name = key.split(".", 1)
        for other, spec in profile.fields.items():
            stored = f"{head}.{other}"
            if spec.follows == name and stored in before and before[stored] == before[key]:
                out[stored] = value
    return out


def _reach(profile: Profile, action: Action) -> tuple[tuple[str, Decimal], ...]:
    """The levels ``action`` stores for a trigger, from its canonical unit (which names its
    channel); none for a unit that does not parse again."""
    if action.channel is None:
        return ()
    try:
        return tuple(r for u in classify(action.canonical, profile.name).units for r in u.reach)
    except ScpiError:
        return ()


def _stored(profile: Profile, actions: list[Action], state: dict[str, str]
            ) -> dict[str, str]:
    """``state`` with the levels ``actions`` store for a trigger (``Unit.reach``: a
    triggered level, a list's points) on their channel's ``points`` fields, the farthest
    kept, carried by every coupling (``couplings.carried``); by every one, on or off, after
    an unpredictable unit that is not the last (``OUTP:TRAC``, ``*RCL`` before ``:TRIG``)."""
    out = dict(state)
    for a in actions:
        for field, level in _reach(profile, a):
            for name, spec in profile.fields.items():
                key = f"ch{a.channel}.{name}"
                if spec.points and profile.limit_of(name) == profile.limit_of(field) and (
                        (old := envelope.magnitude(out.get(key))) is None or abs(level) > old):
                    out[key] = format_number(level)
    if len([a for a in actions if a.unpredictable]) > 1:
        # After the first unpredictable unit a coupling may be on (OUTP:TRAC, *RCL): its
        # state is dropped, so couplings.carried counts it as on (unread fails closed).
        out = {k: v for k, v in out.items()
               if not getattr(profile.fields.get(k.split(".", 1)[-1]), "copies", None)}
    return couplings.carried(profile, out)


def _keys(profile: Profile | None, channel: int | None, field: str) -> list[str]:
    """Where a unit that sets ``field`` lands in a snapshot: its channel's key; for a form
    that reaches every channel (``channel: all``: the E36312A's ``OUTP:TRAC``, a coupling
    read on CH2 alone), each channel that has the field."""
    if channel is None and profile is not None and field in profile.fields:
        found = [snapshot_key(ch, field) for ch in profile.channels
                 if profile.has_field(field, ch)]
        if found:
            return found
    return [snapshot_key(channel, field)]


def unverifiable(actions: list[Action]) -> list[str]:
    """The commands whose effect no read-back can confirm (``*RST``, unknown commands...)."""
    return [a.canonical for a in actions
            if a.effect not in ("read", "select", "harmless", "measure-config")
            and (a.field is None or a.new is None)]


class Snapshots(Part):
    """Reads and predicts instrument state for the other parts of the core."""

    def __init__(self, core: Core) -> None:
        super().__init__(core)
        self.memories = Memories(core)

    def every_field(self, inst: Instrument) -> list[tuple[int | None, str]]:
        """Every field of every channel (not the measured ones): a whole stored state."""
        return self._fields_of(inst.profile, set(inst.profile.channels) or {None})

    def fields(self, inst: Instrument, actions: list[Action]) -> list[tuple[int | None, str]]:
        """Every field the actions depend on; a channel's whole state, or the instrument's."""
        profile = inst.profile
        channels: set[int | None] = set()
        everything = False
        for a in actions:
            if a.effect in ("read", "select", "harmless", "measure-config"):
                continue
            # An effect the gateway cannot predict may reach any channel (a trigger steps
            # every channel INSTrument:COUPle joins): its snapshot reads them all.
            if a.channel is None or a.unpredictable:
                everything = True
            channels.add(a.channel)
        if everything:
            channels = set(profile.channels) or {None}
        return self._fields_of(profile, channels)

    @staticmethod
    def _fields_of(profile: Profile, channels: set[int | None]
                   ) -> list[tuple[int | None, str]]:
        state_fields = [f for f, spec in profile.fields.items() if not spec.measured]
        channels |= couplings.followers(profile, {c for c in channels if c is not None})
        out = [(ch, f) for ch in sorted(channels, key=lambda c: c or 0) for f in state_fields
               if profile.has_field(f, ch)]
        # A mode read on another channel that bounds these (a pairing read on CH2 joins
        # CH3): without it the channel's mode is unread, judged outside.
        modes = [m for ch in channels if ch is not None for m in envelope.modes(profile, ch)]
        return out + [m for m in dict.fromkeys(modes) if m not in out]

    @staticmethod
    async def read_state(link: AsyncLink, inst: Instrument,
                         fields: list[tuple[int | None, str]]) -> Snapshot:
        """``*IDN?`` and every field, read live on the lane (fresh queries, no cache). On a
        profile with ``compound_queries``, its number and boolean fields and ``*IDN?`` in
        one message (scpi/compound.py), each answer normalized as if asked alone. An answer
        it cannot read may be another query's (a line ahead of its time): the connection is
        dropped, so the rest is never read as the next query's answer (lockstep.py). All of
        it on one connection: an instrument that restarted (or a LAN that dropped) midway
        answers the rest in another state, and half of each is no state at all."""
        try:
            with inst.lane.one_connection():
                return await Snapshots._read_state(link, inst, fields)
        except InstrumentError:
            await inst.lane.drop()
            raise

    @staticmethod
    async def _read_state(link: AsyncLink, inst: Instrument,
                          fields: list[tuple[int | None, str]]) -> Snapshot:
        profile = inst.profile
        name = inst.config.name
        plan = read_plan(profile, fields, inst.compound)
        values = {}
        if plan.message is None:
            idn = await link.query(IDN)
            _identified(name, idn)
            inst.idn = idn.strip()
            inst.identity.judge(idn)  # another instrument: asked nothing more (identity.py)
        else:
            try:
                answer = await link.query(plan.message)
                try:
                    answers, idn = plan.split(answer)
                except CompoundAnswerError as exc:
                    raise InstrumentError(f"{name}: {plan.message!r}: answer {shown(answer)} "
                                          f"unreadable: {exc}") from exc
            except InstrumentError:  # another model may not answer this model's message
                await inst.identity.check(link)  # (a cable moved): *IDN? alone tells who
                raise
            _identified(name, idn)
            inst.idn = idn.strip()  # who answered: an emergency stop covers its other names
            if not fits(inst.identity.expected, idn):  # another model, or answers that shift:
                await inst.identity.check(link)  # asked alone, it tells which
                raise InstrumentError(  # it fits alone: an answer held a ';' (lockstep.py)
                    f"{name}: {plan.message!r}: the identity came back as {shown(idn)}, so "
                    "the answers shifted (one held a ';'): none is read")
            for (ch, f), raw in zip(plan.joined, answers, strict=True):
                values[snapshot_key(ch, f)] = normalize(
                    profile, f, raw, f"{name}: {profile.field_query(f, ch)!r}", ch)
        for ch, f in plan.alone:
            query = profile.field_query(f, ch)
            values[snapshot_key(ch, f)] = normalize(profile, f, await link.query(query),
                                                     f"{name}: {query!r}", ch)
        # In the order of ``fields``, as a snapshot read one by one has them.
        return Snapshot(idn=idn, values={k: values[k] for k in
                                         (snapshot_key(ch, f) for ch, f in fields)})

    async def snapshot(self, inst: Instrument, fields: list[tuple[int | None, str]]
                        ) -> Snapshot:
        return await inst.lane.run(lambda link: self.read_state(link, inst, fields))

    def actions(self, inst: Instrument, c: Classification, snap: Snapshot | None
                 ) -> list[Action]:
        actions = []
        for i, u in enumerate(c.units):
            old = None
            if snap is not None and u.field is not None:
                old = snap.values.get(_keys(inst.profile, u.channel, u.field)[0])
            action = Action(
                index=i, source=u.source, text=u.text, effect=u.effect.value, channel=u.channel,
                field=u.field, old=old,
                new=render_value(u.value) if u.value is not None else None,
                canonical=u.canonical, approval=approval_for(u, self.config.policy),
                unpredictable=u.writes and unpredictable(u.effect, u.value), applies=u.note)
            action.words = describe(inst.profile, action)
            actions.append(action)
        if snap is not None:
            self.described(actions, snap, inst.profile)
        return actions

    @classmethod
    def described(cls, actions: list[Action], snap: Snapshot, profile: Profile) -> None:
        """Each action's old value is the one it finds: the state the units before it leave
        (``passed_through``), not the snapshot. 'VOLT 5.9,(@1);VOLT 0.1,(@1)' read
        '0.000 V -> 5.900 V' then '0.000 V -> 0.100 V', as if the second set nothing new."""
        states = cls.passed_through(actions, snap, profile)
        for before, a in zip(states, actions[1:], strict=False):
            if a.field is None:
                continue
            key = _keys(profile, a.channel, a.field)[0]
            if key in before and before[key] != a.old:
                a.old = before[key]
                a.words = describe(profile, a)

    @staticmethod
    def proposed(actions: list[Action], snap: Snapshot, profile: Profile | None = None
                 ) -> dict[str, str]:
        """The state ``actions`` leave from ``snap``; with ``profile``, the copies its
        couplings make too (``couplings.follow``: tracking moves CH3 with CH2), and the
        stored state a recall brings back as the gateway recorded it (``snap.recalled``)."""
        states = Snapshots.passed_through(actions, snap, profile)
        return states[-1] if states else dict(snap.values)

    @staticmethod
    def passed_through(actions: list[Action], snap: Snapshot, profile: Profile | None = None
                       ) -> list[dict[str, str]]:
        """The state after each of ``actions`` in turn (:meth:`proposed` of each prefix),
        each the one before it plus one unit: linear in the units, never predicted again
        from the snapshot for each (a message of 1,150 units held the event loop 10 s)."""
        state = dict(snap.values)
        out: list[dict[str, str]] = []
        for a in actions:
            memory = memory_of(profile, a.canonical) if profile is not None else None
            if profile is not None and memory is not None and memory[1] in snap.recalled:
                state = {**state, **predicted(profile, a.canonical, snap.recalled[memory[1]])}
            if a.field is not None and a.new is not None:
                before = state
                keys = _keys(profile, a.channel, a.field)
                state = {**state, **dict.fromkeys(keys, a.new)}
                spec = profile.fields.get(a.field) if profile is not None else None
                if profile is not None and spec is not None and spec.copies:
                    # A coupling switched on copies what it joins at once (E36300 guide,
                    # OUTPut:TRACk: CH3 takes CH2's setpoint), never only at the read-back.
                    if a.new not in ("0", "OFF", "False"):
                        state = _stored_follow(profile, before, couplings.switched_on(
                            profile, state, a.field))
                elif profile is not None:
                    for key in keys:
                        state = _stored_follow(profile, before,
                                               couplings.follow(profile, state, key))
            out.append(state)
        return out

    def check_envelope(self, inst: Instrument, actions: list[Action], snap: Snapshot) -> None:
        """Invariant 4 before anything is sent, on every channel the write names: the state
        it ends in (the live snapshot plus every action) keeps each energized channel inside
        the envelope, the fields the write does not touch included; and no state it passes
        through on the way (units run in the order they are sent) is outside where the one
        before was not. ``OUTP ON`` before the ``VOLT`` that would make it safe is refused.
        Commands whose effect cannot be predicted are judged by the read-back after them,
        and are never sent while levels stored for a trigger (a list's points, a triggered
        level) are outside on an energized channel: they may be that trigger.
        Raises Refused (-222) naming the field."""
        limits = self.config.envelope.get(inst.config.name, {})
        over = envelope.action_breaches(inst.profile, limits, actions)
        if over:  # a value above its limit, energized or not
            raise Refused(-222, f"{envelope.summary(inst.profile, over)}; nothing was sent")
        profile = inst.profile
        recalls = judge_recalls(profile, limits, actions, snap, self.proposed)
        # Levels stored for a trigger (a list's points, a triggered level) outside on an
        # energized channel: a command whose effect cannot be predicted may be the trigger
        # that applies them, its first point before any read-back. Other breaches found
        # live are the read-back's: it makes them safe on the write's own lane turn. A
        # coupling that may be on carries a channel's stored level to its followers.
        stored = [b for b in envelope.breaches(profile, limits,
                                               _stored(profile, actions, snap.values))
                  if profile.fields[b.field].points]
        blind = [a.canonical for a in actions if a.unpredictable]
        if stored and blind:
            raise Refused(-222, f"levels stored for a trigger are outside the envelope: "
                          f"{envelope.summary(profile, stored)}; {blind[0]} cannot be "
                          "predicted and may apply them, so it is not sent while they are "
                          "stored (store levels inside, or switch the channel off); "
                          "nothing was sent")
        states = self.passed_through(actions, snap, profile)
        clear, revived = envelope.revived(profile, limits, actions, states)
        if revived:
            raise Refused(-222, f"{clear} clears a protection trip, which switches the output "
                          "back on as it was before the trip, at the levels it holds now: "
                          f"{envelope.summary(profile, revived)}; nothing was sent (set the "
                          "levels inside first)")
        # A mode the write sets is judged like a setpoint: an output-off state that keeps an
        # off output's limit in force, a protection turned off (envelope.judged_modes).
        named = {a.channel for a in actions if a.channel is not None and (
            (not a.unpredictable and a.effect in ("setpoint", "output", "protection"))
            or (a.new is not None and a.field in envelope.judged_modes(profile, a.channel)))}
        # A coupling the write switches is judged on every channel it joins, before it is
        # sent: its copies come at once, never only at the read-back after it.
        switched = [a.field for a in actions if a.new is not None and a.field is not None
                    and a.field in profile.fields and profile.fields[a.field].copies]
        for fld in switched:
            named |= couplings.joined(profile, fld) & set(limits)
        if recalls:  # a recalled state sets every channel: each is judged on the record
            named |= set(limits)
        if not named:
            return
        # A coupling that is (or may come) on moves its followers too: judge them with it;
        # after a unit the gateway cannot predict (*RCL, OUTP:TRAC), any coupling may be on.
        seen = None if any(a.unpredictable for a in actions) else [snap.values, *states]
        named |= couplings.followers(profile, named, seen)
        before = {(b.channel, b.field): b for b in envelope.breaches(
            profile, limits, snap.values, named)}
        for done, state in enumerate(states, 1):
            found = envelope.breaches(profile, limits, state, named)
            final = done == len(actions)
            worse = [b for b in found if not envelope.no_worse(b, before.get(
                (b.channel, b.field)))]
            if final and found:
                raise Refused(-222, "outside the envelope once this runs: "
                              f"{envelope.summary(profile, found)}; nothing was sent")
            if worse:
                raise Refused(-222, f"outside the envelope after {actions[done - 1].canonical}: "
                              f"{envelope.summary(profile, worse)}; nothing was sent (units run "
                              "in the order they are sent: make the state safe first)")
            before = {(b.channel, b.field): b for b in found}

    @staticmethod
    def same_units(inst: Instrument, req: TakeoverRequest) -> Classification:
        """The units the approver was shown, from their canonical text (explicit channels),
        never the message again under the run's selection now: that may have moved, or been
        lost with a restart, and would aim the fresh request at another channel."""
        units: list[Unit] = []
        skip = 0
        for a in req.actions:
            if skip:  # one text of a form that switches every channel at once (channel: every)
                skip -= 1
                continue
            again = classify(a.canonical, inst.profile.name).units
            form = inst.profile.form_of(a.canonical)
            if form is not None and form.channel == "every":
                skip = len(again) - 1  # its units are the actions that follow it
            units.extend(dataclasses.replace(u, source=a.source, text=a.text) for u in again)
        return Classification(req.message, inst.profile.name, tuple(units), None)

    async def live_state(self, instrument: str) -> dict[str, Any]:
        """Every field of every channel, measured values included, read live."""
        inst = self.core.instrument(instrument)
        profile = inst.profile
        channels: list[int | None] = list(profile.channels) or [None]
        fields = [(ch, f) for ch in channels for f in profile.fields if profile.has_field(f, ch)]
        snap = await self.snapshot(inst, fields)
        out: dict[str, Any] = {"instrument": instrument, "idn": snap.idn,
                               "at": snap.taken_at.isoformat(), "channels": {}}
        for ch in channels:
            out["channels"][str(ch) if ch is not None else "-"] = {
                f: snap.values.get(snapshot_key(ch, f)) for f in profile.fields}
        return out
