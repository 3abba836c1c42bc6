"""The setpoint in force on each channel, and who approved it.

An output enable runs only with an approved setpoint for its channel that still equals the
live one (DESIGN.md rule 3). The gateway remembers each channel's last approved setpoint,
field by field, with everyone whose approval put it in force, so the two-person rule can
tell who may switch that channel on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from .auth import held_at, revoked_tokens
from .core import Core, Instrument, Part
from .envelope import setpoint_fields
from .handoff import show_value, snapshot_key
from .models import Action, ApprovalKind, Principal, Snapshot, TakeoverRequest
from .plans import PlanScope, within

__all__ = ["SETPOINT_FIELDS", "Setpoints"]

#: The fields of a channel's setpoint, what an approved setpoint remembers: those the
#: envelope's voltage and current bound (envelope.setpoint_fields).
SETPOINT_FIELDS = ("voltage", "current")


class Setpoints(Part):
    def __init__(self, core: Core) -> None:
        super().__init__(core)

    def energize_needs_setpoint(self, inst: Instrument, actions: list[Action],
                                snap: Snapshot) -> dict[int, list[str]]:
        """Channels turned on, or given a setpoint, here with no approved setpoint matching
        the live one, each with the fields of its setpoint this request does not set: the
        present values its setpoint approval approves as they are. A request that sets one
        field (``CURR 0.1,(@1)``, with or without ``OUTP ON,(@1)``) has the other (a voltage
        turned at the panel) approved too, in words, never passed over because something
        on the channel was, nor remembered as approved by someone who never saw it."""
        fields = setpoint_fields(inst.profile)
        missing: dict[int, list[str]] = {}
        for a in actions:
            if a.approval not in (ApprovalKind.OUTPUT_ENABLE, ApprovalKind.SETPOINT) \
                    or a.channel is None or a.channel in missing:
                continue
            mine = {b.field for b in actions if b.approval is ApprovalKind.SETPOINT
                    and b.channel == a.channel}
            rest = [f for f in fields if f not in mine]
            if rest and not self.still_approved(inst, a.channel, snap):
                missing[a.channel] = rest
        return missing

    def still_approved(self, inst: Instrument, channel: int, snap: Snapshot) -> bool:
        stored = self._in_force(self.core.qualified(inst.config.name), channel, snap.idn)
        if stored is None:
            return False
        return all(snap.values.get(snapshot_key(channel, f)) == stored.get(f)
                   for f in setpoint_fields(inst.profile))

    def people_in_force(self, req: TakeoverRequest) -> dict[int, list[str]]:
        """For each channel this request switches on: who approved the setpoint fields in
        force there that the request does not set itself. A remembered setpoint is in force
        only while it equals the state the request was judged on."""
        out: dict[int, list[str]] = {}
        key = f"{req.bench or self.config.bench}/{req.instrument}"
        snap = req.snapshot.values
        inst = self.core.instruments.get(req.instrument)
        fields = setpoint_fields(inst.profile) if inst is not None else SETPOINT_FIELDS
        for a in req.actions:
            if a.approval is not ApprovalKind.OUTPUT_ENABLE or a.channel is None:
                continue
            ch = a.channel
            stored = self._in_force(key, ch, req.snapshot.idn) or {}
            if any(stored.get(f) != snap.get(snapshot_key(ch, f)) for f in fields):
                continue  # not in force: the request needs (and shows) its own setpoint
            mine = {b.field for b in req.actions if b.channel == ch and b.effect == "setpoint"}
            by_field = stored.get("by_field") or {}
            people = {str(p) for f in fields if f not in mine
                      for p in (by_field.get(f) or stored.get("people")
                                or ([stored["by"]] if stored.get("by") else []))}
            out[ch] = sorted(people)
        return out

    def _in_force(self, key: str, channel: int, idn: str) -> dict[str, Any] | None:
        """The channel's remembered setpoint, unless an approval behind it was given with a
        token revoked since: then it is nobody's, and switching on needs its own setpoint
        approval again (a revoked token may have been someone else's hands). Nor is it in
        force on an instrument other than the one it was approved on (``idn``, its
        ``*IDN?``): bench.toml may point the same name at another instrument, another DUT;
        one remembered before setpoints kept it cannot say, and counts for none."""
        stored = self.store.get_setpoint(key, channel)
        if stored is None or stored.get("idn") != idn:
            return None
        tokens = self._behind(stored)
        if tokens and revoked_tokens(self.store).intersection(tokens):
            return None
        return stored

    def _behind(self, stored: dict[str, Any]) -> set[str]:
        """The tokens behind a remembered setpoint, field by field. A field kept without
        them (remembered before setpoints kept them, and kept since while its value
        stayed) stands on the tokens its people held when it was approved: a setpoint in
        force lasts indefinitely, so it must not outlive their revocation either."""
        tokens_field = stored.get("tokens_field") or {}
        by_field = stored.get("by_field") or {}
        if not by_field and not tokens_field:  # kept before it was kept per field
            people = stored.get("people") or ([stored["by"]] if stored.get("by") else [])
            return held_at(self.store, people, stored.get("at"))
        out: set[str] = set()
        for f, people in by_field.items():
            if tokens_field.get(f):
                out.update(tokens_field[f])
            elif people:
                at = ((stored.get("source") or {}).get(f) or {}).get("at") or stored.get("at")
                out |= held_at(self.store, people, at)
        return out

    def revoked_cover(self, req: TakeoverRequest) -> dict[int, list[str]]:
        """The channels of ``req``'s shown cover (``setpoint_cover``) whose setpoint in
        force was approved with a token revoked since, each with those tokens: that
        setpoint is nobody's now, and the cover no longer stands."""
        key = f"{req.bench or self.config.bench}/{req.instrument}"
        out: dict[int, list[str]] = {}
        revoked: frozenset[str] | None = None
        for entry in req.handoff.get("setpoint_cover") or []:
            ch = int(entry["channel"])
            stored = self.store.get_setpoint(key, ch) or {}
            tokens = self._behind(stored)
            if not tokens:
                continue
            revoked = revoked_tokens(self.store) if revoked is None else revoked
            if gone := revoked.intersection(tokens):
                out[ch] = sorted(gone)
        return out

    def cover(self, inst: Instrument, actions: list[Action],
              snap: Snapshot) -> list[dict[str, Any]]:
        """For each channel switched on here without a setpoint of its own: the approved
        setpoint in force that covers it, field by field (value, who approved it, when, in
        which request), so the reviewer of an output enable sees the other approval behind
        it. A channel with no setpoint in force needs (and shows) its own setpoint."""
        out: list[dict[str, Any]] = []
        key = self.core.qualified(inst.config.name)
        fields = setpoint_fields(inst.profile)
        for a in actions:
            if a.approval is not ApprovalKind.OUTPUT_ENABLE or a.channel is None:
                continue
            ch = a.channel
            mine = {b.field for b in actions if b.channel == ch and b.effect == "setpoint"}
            stored = self._in_force(key, ch, snap.idn)
            if stored is None or any(stored.get(f) != snap.values.get(snapshot_key(ch, f))
                                     for f in fields):
                continue
            shown = []
            for f in fields:
                if f in mine:
                    continue
                source = (stored.get("source") or {}).get(f) or {}
                shown.append({
                    "field": f, "value": stored.get(f),
                    "shown": show_value(inst.profile, f, stored.get(f)),
                    "by": (stored.get("by_field") or {}).get(f) or stored.get("people") or [],
                    "at": source.get("at") or stored.get("at"),
                    "request": source.get("request") or stored.get("request")})
            if shown:
                out.append({"channel": ch, "fields": shown})
        return out

    def remember(self, req: TakeoverRequest, inst: Instrument,
                 after: dict[str, str]) -> None:
        """The live setpoint of each channel whose setpoint was approved here, with who
        approved each field of it: a field this request did not set keeps its approvers
        while its value is the one they approved."""
        if ApprovalKind.SETPOINT not in req.approved_kinds():
            return
        channels = {a.channel for a in req.actions if a.channel is not None and (
            a.approval is ApprovalKind.SETPOINT or a.approval is ApprovalKind.OUTPUT_ENABLE)}
        setpoint = [a for a in req.valid_approvals() if a.kind is ApprovalKind.SETPOINT]
        by = setpoint[0].by if setpoint else ""
        # Everyone whose approval put this setpoint in force: a plan's approvers for a step.
        people = sorted({p for a in setpoint for p in (a.people or [a.by])})
        tokens = sorted({t for a in setpoint for t in a.tokens})
        # When the setpoint was approved: the last approval that put it in force.
        approved_at = max((a.at for a in setpoint), default=self.clock()).isoformat()
        key = self.core.qualified(inst.config.name)
        # Channels switched on with no approved setpoint in force: this request's setpoint
        # approval approved their present setpoint as it was.
        needed_on = {int(n["channel"]) for n in req.handoff.get("setpoint_needed") or []}
        fields = setpoint_fields(inst.profile)
        scope = self._step_scope(req)
        for ch in channels:
            mine = {a.field for a in req.actions if a.channel == ch and a.effect == "setpoint"}
            needed = ch in needed_on
            prior = self._in_force(key, ch, req.snapshot.idn) or {}
            by_field: dict[str, list[str]] = {}
            tokens_field: dict[str, list[str]] = {}
            source: dict[str, dict[str, str]] = {}
            values: dict[str, str | None] = {}
            for f in fields:
                value = values[f] = after.get(snapshot_key(ch, f))
                kept = (prior.get("by_field") or {}).get(f) or prior.get("people") or []
                if scope is not None and f not in mine and (prior.get(f) != value or not kept) \
                        and not within(scope, inst.profile, ch, f, value):
                    # A plan's step: its approvers approved its scope, not a value outside
                    # it left on the channel (a current limit turned at the panel): nobody's.
                    values[f], by_field[f] = None, []
                elif f in mine or needed or prior.get(f) != value or not kept:
                    by_field[f], tokens_field[f] = people, tokens
                    source[f] = {"request": req.id, "at": approved_at}
                else:
                    by_field[f] = sorted(kept)
                    tokens_field[f] = list((prior.get("tokens_field") or {}).get(f) or [])
                    source[f] = (prior.get("source") or {}).get(f) or {
                        "request": prior.get("request", ""), "at": prior.get("at", "")}
            self.store.put_setpoint(key, ch, {
                **values,
                "request": req.id, "by": by, "by_field": by_field, "source": source,
                "idn": req.snapshot.idn,  # the instrument it was approved on
                "tokens_field": tokens_field,
                "people": sorted({p for v in by_field.values() for p in v}),
                "at": self.clock().isoformat()})

    def stand_down(self, names: list[str], who: Principal) -> set[str]:
        """An emergency stop of ``names``: the setpoint in force on each of their channels
        ends, as their plans do (an approval given before the stop never runs after it).
        No run is suspended for it (returns none)."""
        for name in names:
            self.withdraw(name, None, f"the emergency stop ({who.name})")
        return set()

    def made_safe(self, instrument: str, channels: list[int],
                  why: str = "an envelope breach") -> None:
        """The gateway gave ``channels`` the safe action (a breach, a lost client's lease):
        the setpoint in force there ends with the plans over them; a person looks first."""
        self.withdraw(instrument, channels, f"the gateway made it safe ({why})")

    def withdraw(self, instrument: str, channels: Iterable[int] | None, why: str) -> None:
        """The setpoint in force on ``channels`` (None: every channel) of ``instrument`` is
        nobody's now: switching one on again needs a setpoint approval of its own. Kept as
        a record with no instrument behind it (``_in_force`` finds none), saying why."""
        inst = self.core.instruments.get(instrument)
        if inst is None:
            return
        key = self.core.qualified(instrument)
        for ch in inst.profile.channels if channels is None else channels:
            stored = self.store.get_setpoint(key, ch)
            if stored is not None and "withdrawn" not in stored:
                self.store.put_setpoint(key, ch, {"withdrawn": why,
                                                  "at": self.clock().isoformat()})

    def _step_scope(self, req: TakeoverRequest) -> PlanScope | None:
        """The scope of the plan a write ran inside unattended, or None."""
        if req.plan_id is None or not req.handoff.get("auto_step"):
            return None
        raw = self.store.kv_get("plans", req.plan_id) or {}
        try:
            return PlanScope.model_validate(raw.get("scope"))
        except ValidationError:
            return None
