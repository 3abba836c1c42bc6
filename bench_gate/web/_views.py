"""What the console pages show, computed from the core's records: pure functions only.

Diff rows (shown, live now, proposed), editable setpoints with their limits, badges, the
setpoint approval an output enable stands on, outcomes said once, fields outside the
envelope, and the journal as a waterfall.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from ..config import ChannelLimits
from ..handoff import show_value
from ..listing import AnyRequest
from ..models import ApprovalKind, Event, Status, TakeoverRequest
from ..scpi import Profile

__all__ = [
    "DiffRow",
    "EditField",
    "Waterfall",
    "badges",
    "channels",
    "check_edit",
    "cover_rows",
    "decider_names",
    "deciders",
    "diff_rows",
    "edit_fields",
    "flatten",
    "limits_of",
    "outcome_words",
    "over_envelope",
    "relevant",
    "show",
    "utc",
    "waterfall",
]

KIND_WORDS = {
    ApprovalKind.SETPOINT: "the setpoint",
    ApprovalKind.OUTPUT_ENABLE: "the output enable",
    ApprovalKind.STATE: "the state change",
}


def show(profile: Profile | None, key: str, value: str | None) -> str:
    """A stored value as a person reads it: ``3.300 V``, ``ON``."""
    return show_value(profile, key.split(".", 1)[-1], value, missing="—")


def label(profile: Profile | None, key: str) -> str:
    ch, _, name = key.partition(".")
    if not name:
        ch, name = "", key
    spec = profile.fields.get(name) if profile is not None else None
    words = spec.label if spec is not None else name
    return f"{ch.upper()} {words}".strip()


def flatten(state: dict[str, Any]) -> dict[str, str]:
    """``live_state`` output as snapshot keys: ``{"ch1.voltage": "3.3", ...}``."""
    out: dict[str, str] = {}
    for ch, fields in state.get("channels", {}).items():
        for name, value in fields.items():
            if value is None:
                continue
            out[name if ch == "-" else f"ch{ch}.{name}"] = str(value)
    return out


def relevant(req: TakeoverRequest, live: dict[str, str]) -> dict[str, str]:
    """The live values of the fields this request was judged against."""
    return {k: live[k] for k in req.snapshot.values if k in live}


@dataclass(frozen=True, slots=True)
class DiffRow:
    key: str
    label: str
    shown: str  # at the time of the request (the snapshot the approval binds to)
    live: str  # read live when this page was rendered
    proposed: str
    changes: bool  # the request changes this field
    drifted: bool  # the instrument changed since the request was made


def diff_rows(req: TakeoverRequest, profile: Profile | None,
              live: dict[str, str] | None) -> list[DiffRow]:
    proposed: dict[str, str] = dict(req.handoff.get("proposed") or {})
    snap = req.snapshot.values
    keys = sorted(set(snap) | set(proposed))
    rows = []
    for key in keys:
        old = snap.get(key)
        new = proposed.get(key, old)
        now_value = live.get(key) if live is not None else None
        rows.append(DiffRow(
            key=key, label=label(profile, key), shown=show(profile, key, old),
            live=show(profile, key, now_value) if live is not None else "(not read)",
            proposed=show(profile, key, new), changes=new != old,
            drifted=live is not None and now_value != old))
    rows.sort(key=lambda r: (not r.changes, r.key))
    return rows


@dataclass(frozen=True, slots=True)
class EditField:
    key: str  # "CH1.voltage", the core's edit key
    label: str
    value: str
    unit: str
    low: Decimal
    high: Decimal
    limit_note: str


def limits_of(profile: Profile | None, limits: dict[int, ChannelLimits], channel: int,
              name: str) -> tuple[Decimal, Decimal, str]:
    """What a field of a channel may be set to: the instrument's range, narrowed by the
    bench's envelope; with words that say which limit applies."""
    low, high, note = Decimal(0), Decimal("1e9"), "no limit known"
    hard = profile.range_of(name, channel) if profile is not None else None
    if hard is not None:
        low, high, note = hard[0], hard[1], f"instrument range {hard[0]}–{hard[1]}"
    key = profile.limit_of(name) if profile is not None else name  # an SMU's VLIM: voltage
    bench = getattr(limits.get(channel), key, None) if channel in limits else None
    if isinstance(bench, Decimal) and bench <= high:
        high, note = bench, f"bench envelope ≤ {bench}"
    return low, high, note


def edit_fields(req: TakeoverRequest, profile: Profile | None,
                limits: dict[int, ChannelLimits]) -> list[EditField]:
    """The setpoints a decider may change in place before approving. A field the message
    sets more than once holds the value it leaves (the last), and its note says each step:
    an edit replaces every one (``Decisions._apply_edits``), and the first value in the box
    read as the setpoint while the last one ran."""
    steps: dict[str, list[str]] = {}
    for a in req.actions:
        if a.effect != "setpoint" or a.channel is None or a.field not in ("voltage", "current") \
                or a.new is None:
            continue
        steps.setdefault(f"CH{a.channel}.{a.field}", []).append(a.new)
    out: list[EditField] = []
    for key, values in steps.items():
        ch, _, name = key.partition(".")
        channel = int(ch[2:])
        low, high, note = limits_of(profile, limits, channel, name)
        if len(values) > 1:
            said = ", then ".join(show(profile, name, v) for v in values)
            note = (f"set {len(values)} times in this message: {said}; a change replaces "
                    f"every one; {note}")
        spec = profile.fields.get(name) if profile is not None else None
        out.append(EditField(key=key, label=label(profile, f"ch{channel}.{name}"),
                             value=values[-1], unit=spec.unit if spec is not None else "",
                             low=low, high=high, limit_note=note))
    return out


def check_edit(field: EditField, raw: str) -> tuple[str | None, str | None]:
    """(the value to send, or None if unchanged; an error in words, or None)."""
    text = raw.strip()
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None, f"{field.label}: {text!r} is not a number"
    if not value.is_finite():
        return None, f"{field.label}: {text!r} is not a number"
    if value < field.low or value > field.high:
        return None, (f"{field.label}: {value} {field.unit} is outside {field.low}–"
                      f"{field.high} {field.unit} ({field.limit_note})")
    try:
        unchanged = value == Decimal(field.value)
    except InvalidOperation:
        unchanged = False
    return (None if unchanged else text), None


def badges(req: AnyRequest) -> list[tuple[str, str]]:
    """(css class, words) for the queue and the request page."""
    out: list[tuple[str, str]] = []
    if any(a.approval is ApprovalKind.OUTPUT_ENABLE for a in req.actions):
        out.append(("energize", "TURNS OUTPUT ON"))
    touched = {a.channel for a in req.actions if a.channel is not None}
    live = sorted(int(k[2:].split(".")[0]) for k, v in req.snapshot.values.items()
                  if k.startswith("ch") and k.endswith(".output") and v == "1")
    live_touched = [c for c in live if c in touched or not touched]
    if live_touched:
        out.append(("live", "OUTPUT LIVE: " + ", ".join(f"CH{c}" for c in live_touched)))
    if req.handoff.get("plan"):
        out.append(("plan", "STANDING PLAN"))
    if req.handoff.get("stale_diff"):
        out.append(("stale", "RESUBMITTED AFTER A CHANGE"))
    edited = req.handoff.get("edited")
    editors = dict.fromkeys(str(e.get("by")) for e in edited if isinstance(e, dict)) \
        if isinstance(edited, list) else {}
    if editors:
        out.append(("edited", "EDITED BY " + ", ".join(editors)))
    return out



def channels(req: AnyRequest) -> str:
    """Every channel a request touches, for the queue's first column (``CH1, CH3``)."""
    return ", ".join(f"CH{c}" for c in sorted({a.channel for a in req.actions
                                                if a.channel is not None}))


def what_changes(req: AnyRequest) -> str:
    words = [a.words or a.canonical for a in req.actions if a.effect not in ("read", "select")]
    return "; ".join(words) or req.message


@dataclass(frozen=True, slots=True)
class Waterfall:
    at: datetime
    offset: float  # seconds since the first row
    left: float  # percent
    kind: str
    who: str
    text: str
    request_id: str | None
    data: dict[str, Any]


def _event_text(e: Event) -> str:
    """The detail of one journal event; the event's name stands beside it, so the text
    does not say it again ("takeover denied" · “not on this DUT”)."""
    d = e.data
    if e.type.value == "command_received":
        return str(d.get("message"))
    if e.type.value == "takeover_requested":
        needs = ", ".join(k.replace("_", " ") for k in d.get("required", []))
        return f"{d.get('command')} (needs {needs})"
    if e.type.value == "approval_granted":
        kinds = [d["kind"]] if d.get("kind") else d.get("kinds", [])
        words = ", ".join(str(k).replace("_", " ") for k in kinds)
        return words + (f": “{d['notes']}”" if d.get("notes") else "")
    if e.type.value == "approval_withdrawn":
        kind = str(d.get("kind", "")).replace("_", " ")
        return f"{kind} approval by {d.get('by')}: {d.get('reason')}"
    if e.type.value == "takeover_denied":
        return f"“{d.get('notes')}”"
    if e.type.value == "run_suspended":
        return str(d.get("reason") or "").removeprefix("suspended ")
    if e.type.value == "proposal_edited":
        return (f"edited {d.get('edits')}: {'; '.join(d.get('old_commands', []))} → "
                f"{'; '.join(d.get('new_commands', []))}")
    if e.type.value == "step_completed":
        receipt = d.get("receipt") or {}
        return "sent " + "; ".join(receipt.get("sent", [])) if receipt else ""
    if e.type.value in ("step_failed", "write_refused"):
        return str(d.get("reason"))
    if e.type.value == "takeover_stale":
        diff = d.get("diff") or {}
        return ", ".join(f"{k} {v.get('shown')} → {v.get('live')}" for k, v in diff.items())
    if e.type.value == "read_executed":
        return f"{d.get('message')} → {d.get('response')}"
    return ", ".join(f"{k}={v}" for k, v in d.items() if k not in ("status",) and v)[:200]


def waterfall(events: Iterable[Event], principal: str,
              views: Iterable[dict[str, Any]] = ()) -> list[Waterfall]:
    """The run's journal, plus the console's record of what was shown to whom, in time."""
    rows: list[tuple[datetime, str, str, str, str | None, dict[str, Any]]] = []
    for e in events:
        # A withdrawal's "by" is the approver it withdrew; the gateway withdrew it.
        who = str((e.type.value != "approval_withdrawn" and e.data.get("by")) or (
            principal if e.type.value in ("command_received", "run_created", "goal_set")
            else "gateway"))
        rows.append((e.at, e.type.value, who, _event_text(e), e.request_id, e.data))
    for v in views:
        action = str(v["action"])
        text = (f"shown to {v['who']} on the console: {v.get('summary', '')}"
                if action == "viewed" else
                f"{v['who']} on the console: {v.get('summary', '')}")
        rows.append((datetime.fromisoformat(str(v["at"])), "console_" + action,
                     str(v["who"]), text, str(v["request_id"]), v))
    rows.sort(key=lambda r: r[0])
    if not rows:
        return []
    start, end = rows[0][0], rows[-1][0]
    span = max((end - start).total_seconds(), 1e-3)
    return [Waterfall(at=at, offset=(at - start).total_seconds(),
                      left=round((at - start).total_seconds() / span * 92, 2), kind=kind,
                      who=who, text=text, request_id=rid, data=data)
            for at, kind, who, text, rid, data in rows]


def utc(at: datetime | str | None) -> str:
    """RFC 3339 in UTC with ``Z`` (``2026-12-03T11:15:02.123Z``): for ``<time datetime>``."""
    if at is None:
        return ""
    if isinstance(at, str):
        try:
            at = datetime.fromisoformat(at.replace("Z", "+00:00"))
        except ValueError:
            return ""  # not a time: no machine-readable value rather than a wrong one
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class CoverRow:
    channel: int
    label: str  # "CH1 voltage setpoint"
    value: str  # "5.000 V"
    by: str  # "olga, pete"
    at: str  # RFC 3339
    request: str  # the request whose approval put it in force


def cover_rows(req: TakeoverRequest, profile: Profile | None) -> list[CoverRow]:
    """The approved setpoint an output enable stands on (the handoff's ``setpoint_cover``):
    each field with its value, who approved it, when, and in which request."""
    rows = []
    for ch in req.handoff.get("setpoint_cover") or []:
        channel = int(ch["channel"])
        for f in ch.get("fields") or []:
            key = f"ch{channel}.{f['field']}"
            rows.append(CoverRow(channel=channel, label=label(profile, key),
                                 value=show(profile, key, f.get("value")),
                                 by=", ".join(f.get("by") or []) or "?",
                                 at=utc(f.get("at")), request=str(f.get("request") or "")))
    return rows


def outcome_words(req: TakeoverRequest) -> str:
    """The outcome in one sentence, each thing said once: the status is shown beside it,
    so its word is not repeated, and a denial's note is not quoted twice."""
    if req.status is Status.DENIED:
        who = req.decided_by or _denier(req.outcome or "")
        return f"Denied by {who or 'an operator'}. Note to the requester: “{req.notes or ''}”"
    text = req.outcome or req.status.value
    head, sep, rest = text.partition(": ")
    if sep and head == req.status.value:
        text = rest
    return text[:1].upper() + text[1:]


def _denier(outcome: str) -> str:
    """The denier named by a request decided before ``decided_by`` was kept."""
    head = outcome.partition(":")[0]
    return head[len("denied by "):] if head.startswith("denied by ") else ""


def _ender(req: AnyRequest) -> str:
    """Who denied or cancelled ``req`` ("" for none)."""
    return req.decided_by or (_denier(req.outcome or "") if req.status is Status.DENIED
                              else "")


def decider_names(req: AnyRequest) -> list[str]:
    """Everyone who decided ``req``: its approvers, and who denied or cancelled it."""
    return list(dict.fromkeys([*(a.by for a in req.approvals), *filter(None, [_ender(req)])]))


def deciders(req: AnyRequest) -> str:
    """History's "By": the approvers, and whoever denied or cancelled the request."""
    names = list(dict.fromkeys(a.by for a in req.approvals))
    if ender := _ender(req):
        names.append(f"{ender} ({req.status.value})")
    return ", ".join(names) or "—"


def over_envelope(profile: Profile | None, limits: dict[int, ChannelLimits], channel: str,
                  values: dict[str, Any]) -> dict[str, str]:
    """The fields of a channel above the bench envelope, each with words that say so
    (never colour alone): ``{"current": "above the envelope: limit 0.500 A"}``."""
    try:
        lim = limits.get(int(channel))
    except ValueError:
        return {}
    if lim is None:
        return {}
    out = {}
    bounds = lim.model_dump()
    # Every field a bench limit bounds (Profile.limit_of: an SMU's level and limit in both
    # source functions), by its magnitude, as the envelope judges it.
    names = list(bounds) if profile is None else [
        f for f, spec in profile.fields.items() if not spec.measured]
    for name in names:
        bound = bounds.get(profile.limit_of(name) if profile is not None else name)
        raw = values.get(name)
        if not isinstance(bound, Decimal) or raw is None:
            continue
        try:
            above = abs(Decimal(str(raw))) > bound
        except InvalidOperation:
            continue
        if above:
            out[name] = f"above the envelope: limit {show(profile, name, str(bound))}"
    return out
