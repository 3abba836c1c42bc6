"""What a reviewer is shown: each action in words, the run's goal and trajectory, the
rationale, reversibility, the risk signal, the live state with a diff, and the approvals.

The same payload is journaled with ``takeover_requested`` so an audit shows what was shown.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

from . import envelope
from .config import ChannelLimits
from .models import Action, Event, EventType, Run, Snapshot, TakeoverRequest
from .scpi import CommandSpec, Profile, ProfileError, ScpiError, classify

__all__ = ["applies", "build_handoff", "change_words", "cover_words", "describe",
           "edit_words", "present_words", "show_value", "shown_fields", "snapshot_key"]


def snapshot_key(channel: int | None, field: str) -> str:
    return f"ch{channel}.{field}" if channel is not None else field


def show_value(profile: Profile | None, field: str, value: str | None,
               missing: str = "?") -> str:
    """A stored value as a person reads it: ``3.300 V``, ``ON``."""
    if value is None:
        return missing
    spec = profile.fields.get(field) if profile is not None else None
    if spec is None:
        return value
    if spec.type == "boolean":
        return "ON" if value in ("1", "ON", "True", "true") else "OFF"
    if spec.flags:
        try:
            bits = int(Decimal(value))
        except (InvalidOperation, ValueError):
            return value
        return "+".join(w for b, w in sorted(spec.flags.items()) if bits >> b & 1) or "none"
    if spec.type == "number":
        step = spec.resolution.normalize()
        try:  # a list's points each in the field's step: ``3.000, 20.000 V``
            shown = ", ".join(f"{Decimal(v).quantize(step, ROUND_HALF_EVEN):f}"
                              for v in (value.split(",") if spec.points else [value]))
        except (InvalidOperation, ValueError):
            return value
        return f"{shown} {spec.unit}".strip()
    return value


def present_words(profile: Profile | None, needed: list[dict[str, Any]] | None) -> list[str]:
    """The present setpoint fields an energize's setpoint approval approves as they are
    (the handoff's ``setpoint_needed``), in words: ``CH1 voltage setpoint 5.900 V as it is
    now``. They are part of what that approval means, as much as the values it sets."""
    out: list[str] = []
    for entry in needed or []:
        for name, value in entry.items():
            if name == "channel":
                continue
            spec = profile.fields.get(name) if profile is not None else None
            label = spec.label if spec is not None else name
            out.append(f"CH{entry.get('channel')} {label} "
                       f"{show_value(profile, name, value)} as it is now")
    return out


def change_words(profile: Profile | None, pairs: dict[str, Any] | None) -> list[str]:
    """State changes (``{"ch1.voltage": [old, new]}``) as a person reads them, each with
    its label and unit: ``CH1 voltage setpoint 0.000 V → 2.000 V``, ``CH1 output OFF →
    ON``. The CLI printed ``ch1.voltage: 0.0 → 2.0`` and ``ch1.output: 0 → 1``."""
    out: list[str] = []
    for key, pair in (pairs or {}).items():
        old, new = [*pair, None, None][:2]
        ch, _, name = key.partition(".")
        if not name:
            ch, name = "", key
        spec = profile.fields.get(name) if profile is not None else None
        where = f"{ch.upper()} " if ch else ""
        out.append(f"{where}{spec.label if spec is not None else name} "
                   f"{show_value(profile, name, old, '—')} → "
                   f"{show_value(profile, name, new, '—')}")
    return out


def shown_fields(profile: Profile | None, entries: list[dict[str, Any]] | None
                 ) -> list[dict[str, Any]]:
    """``setpoint_needed``'s entries with each value as a person reads it (``1.000 A``)."""
    return [{k: v if k == "channel" else show_value(profile, k, v, "—") for k, v in e.items()}
            for e in entries or []]


def edit_words(edit: dict[str, Any]) -> str:
    """One edit an approver made (the handoff's ``edited``), in words: ``CH1.voltage=2;
    what runs now: VOLT 2.0,(@1); OUTP 1,(@1)``, beside the command as sent."""
    changed = ", ".join(f"{k}={v}" for k, v in (edit.get("edits") or {}).items())
    return f"{changed}; what runs now: {'; '.join(edit.get('commands') or [])}"


def cover_words(profile: Profile | None, cover: list[dict[str, Any]] | None) -> list[str]:
    """The approved setpoint an output enable stands on (the handoff's ``setpoint_cover``),
    in the words beside its box: ``5.000 V (olga, tk-…)``, each field. The console shows
    them and the approval's journaled meaning keeps them: what the person read is what was
    recorded, values included."""
    out: list[str] = []
    for entry in cover or []:
        for f in entry.get("fields") or []:
            by = ", ".join(f.get("by") or []) or "?"
            out.append(f"{show_value(profile, str(f.get('field')), f.get('value'), '—')} "
                       f"({by}, {f.get('request') or '?'})")
    return out


def describe(profile: Profile, action: Action) -> str:
    """One action in words: ``CH1 voltage setpoint 3.300 V → 12.000 V``."""
    where = f"CH{action.channel} " if action.channel is not None else ""
    command = _command_of(profile, action.canonical)
    note = f" ({command.note})" if command is not None and command.note else ""
    if action.field is not None and action.field in profile.fields:
        # A field's command keeps its note: what the approver must know (the 2450's remote
        # sense moves where the source regulates; the words are all they are shown).
        label = profile.fields[action.field].label
        if action.new is None:
            return f"{where}{label}: {action.canonical}{note}"
        return (f"{where}{label} {show_value(profile, action.field, action.old)} → "
                f"{show_value(profile, action.field, action.new)}{note}")
    if action.effect == "unknown":
        return f"{action.canonical}: a command the gateway does not know{note}"
    if action.effect == "excites":
        applied = action.applies or applies(profile, action.canonical)
        return (f"{action.canonical}: the {_noun(profile)} drives the DUT: "
                f"{applied or 'it sources current or voltage into whatever is connected'}")
    return f"{where}{action.effect} change: {action.canonical}{note}"


def _command_of(profile: Profile, canonical: str) -> CommandSpec | None:
    """The profile's command a canonical unit was rendered from, found as the classifier
    finds it: ``SENS:VOLT:RSEN 1`` is ``SENSe:VOLTage[:DC]:RSENse``, though no substring of
    it (a search by substring lost most notes)."""
    head = canonical.split(" ", 1)[0].rstrip("?")
    words = tuple(w.rstrip("0123456789") for w in head.lstrip("*").split(":"))
    entry = profile.lookup(head.startswith("*"), words)
    return entry.command if entry is not None else None


def applies(profile: Profile, canonical: str) -> str:
    """What an ``excites`` command applies to the DUT, in the profile's words."""
    try:
        units = classify(canonical, profile.name).units
    except (ScpiError, ProfileError):
        return ""
    return "; ".join(dict.fromkeys(u.note for u in units if u.note))


def _noun(profile: Profile) -> str:
    return {"meter": "meter", "supply": "supply", "load": "load", "smu": "SMU"}.get(
        profile.kind, "instrument")


def _reversibility(req: TakeoverRequest, profile: Profile, blind: list[str]) -> str | None:
    """The words for an instrument without outputs (a meter), or None for one with them."""
    if profile.safe_action is not None:
        return None
    noun = _noun(profile)
    exciting = [a.canonical for a in req.actions if a.effect == "excites"]
    if exciting:
        what = "; ".join(dict.fromkeys(filter(None, (
            a.applies or applies(profile, a.canonical)
            for a in req.actions if a.effect == "excites"))))
        return (f"excites the DUT: the {noun} applies {what or 'current or voltage'} to "
                f"whatever is connected to its inputs ({', '.join(exciting)})")
    if blind:
        return (f"unpredictable: the gateway cannot predict what {', '.join(blind)} does to "
                f"the {noun}'s set-up; a {noun} has no outputs, but the function it leaves "
                "selected may drive current into the DUT on the next reading")
    return (f"reversible: a {noun} has no outputs; this changes what it measures and how, "
            "not what reaches the DUT")


def _held_off(profile: Profile, state: dict[str, str]) -> str:
    """The channels of ``state`` whose output is off in an output-off state that still
    holds a level on the terminals (``FieldSpec.off_holds``), in words; "" if none."""
    safe = profile.safe_action
    if safe is None:
        return ""
    return "; ".join(f"CH{ch} {why}" for ch in profile.channels
                     if snapshot_key(ch, safe.field) in state
                     and (why := envelope.in_force(profile, state, ch)[1]))


def _recent(history: list[Event]) -> list[dict[str, Any]]:
    """What the run already did, for its reviewer: a command refused (``write_refused``)
    shows as refused and why, never only as "command received"."""
    recent: list[dict[str, Any]] = []
    for e in history:
        if e.type is EventType.WRITE_REFUSED:
            why = f"refused: {e.data.get('code')}, {e.data.get('reason')}" \
                if e.data.get("code") is not None else f"refused: {e.data.get('reason')}"
            last = recent[-1] if recent else None
            if last is not None and last["type"] == EventType.COMMAND_RECEIVED.value \
                    and last["command"] == e.data.get("message") and not last["status"]:
                last["status"] = why  # the command it refuses, just received
                continue
            recent.append({"at": e.at.isoformat(), "type": e.type.value,
                           "command": e.data.get("message"), "status": why})
        elif e.type in (EventType.COMMAND_RECEIVED, EventType.STEP_COMPLETED,
                        EventType.STEP_FAILED, EventType.TAKEOVER_DENIED) \
                and e.data.get("origin", "client") == "client":  # not the gateway's SYST:ERR?
            recent.append({"at": e.at.isoformat(), "type": e.type.value,
                           "command": e.data.get("message"), "status": e.data.get("status")})
    return recent[-10:]


def build_handoff(
    req: TakeoverRequest,
    run: Run,
    profile: Profile,
    limits: dict[int, ChannelLimits],
    history: list[Event],
    proposed: dict[str, str],
    stale_diff: dict[str, tuple[str | None, str | None]] | None = None,
) -> dict[str, Any]:
    snap: Snapshot = req.snapshot
    live_outputs = sorted(
        int(k[2:].split(".")[0]) for k, v in snap.values.items()
        if k.startswith("ch") and k.endswith(".output") and v == "1"
    )
    touched = sorted({a.channel for a in req.actions if a.channel is not None})
    energizes = [a.channel for a in req.actions if a.approval == "output_enable"]
    blind = [a.canonical for a in req.actions if a.unpredictable]
    without_outputs = _reversibility(req, profile, blind)
    if without_outputs is not None:
        reversibility = without_outputs
    elif blind:
        # Never claim "nothing reaches the DUT" for a command nobody can predict.
        reversibility = (f"unpredictable: the gateway cannot predict what {', '.join(blind)} "
                         "does to setpoints and outputs, so it needs every approval; after "
                         "it, every channel is read back and held to the envelope (a breach "
                         "switches that output off at once)")
    elif energizes:
        reversibility = (f"energizes the DUT: output of CH{', CH'.join(map(str, energizes))} "
                         "turns on")
    elif any(c in live_outputs for c in touched) or (live_outputs and not touched):
        reversibility = ("live: the output is on, so this change reaches the DUT at once "
                         f"(CH{', CH'.join(map(str, live_outputs))} on)")
    else:
        reversibility = "reversible: outputs are off, nothing reaches the DUT until enabled"
    if held := _held_off(profile, proposed):
        # An output-off state that still sources (the 2450's ZERO) is no "off".
        live = f"live while off: {held}"
        reversibility = live if reversibility.startswith("reversible") else \
            f"{reversibility}; {live}"
    margins: list[dict[str, Any]] = []
    for a in req.actions:
        if a.channel is None or a.field is None or a.new is None:
            continue
        limit = getattr(limits.get(a.channel), a.field, None) if a.channel in limits else None
        if isinstance(limit, Decimal):
            try:
                value = Decimal(a.new)
            except InvalidOperation:
                continue
            margin = limit - value
            # A tenth of a percent: finer digits are noise no reviewer decides on.
            pct = round(float(margin / limit * 100), 1) if limit else 0.0
            margins.append({
                "channel": a.channel, "field": a.field, "value": a.new, "limit": str(limit),
                "margin": str(margin), "margin_pct": pct,
                # The console's and the CLI's one sentence for it.
                "words": (f"CH{a.channel} {a.field} {show_value(profile, a.field, a.new)} of "
                          f"limit {show_value(profile, a.field, str(limit))}: margin "
                          f"{show_value(profile, a.field, str(margin))} ({pct:.0f}%)"),
            })
    signals: list[str] = []
    if req.confidence is not None:
        signals.append(f"requester's confidence {req.confidence:.2f}")
    tight = [m for m in margins if m["margin_pct"] < 10]
    for m in tight:
        signals.append(f"CH{m['channel']} {m['field']} within {m['margin_pct']:.0f}% of the "
                       "bench limit")
    if any(a.effect == "unknown" for a in req.actions):
        signals.append("contains a command the gateway does not know")
    if blind:
        signals.append("its effect on setpoints and outputs cannot be predicted")
    if any(a.effect == "excites" for a in req.actions):
        signals.append(f"the {_noun(profile)} drives current or voltage into the DUT")
    diff = {k: [snap.values.get(k), v] for k, v in sorted(proposed.items())
            if snap.values.get(k) != v}
    recent = _recent(history)
    return {
        "command": req.message,
        "instrument": req.instrument,
        "bench": req.bench,
        "profile": profile.name,
        "idn": snap.idn,
        "actions": [a.model_dump(mode="json") for a in req.actions],
        "goal": run.goal,
        "run": {"id": run.id, "kind": run.kind.value, "principal": run.principal},
        "history": recent,
        "rationale": req.rationale,
        "reversibility": reversibility,
        "risk": {"confidence": req.confidence, "envelope": margins, "signals": signals},
        "snapshot": snap.values,
        "snapshot_at": snap.taken_at.isoformat(),
        "proposed": proposed,
        "diff": diff,
        "diff_words": change_words(profile, diff),
        "stale_diff": ({k: list(v) for k, v in stale_diff.items()} if stale_diff else None),
        "stale_diff_words": change_words(profile, stale_diff) if stale_diff else None,
        "required": [k.value for k in req.required],
        "expires_at": req.expires_at.isoformat(),
        "proposal_hash": req.proposal_hash,
    }
