"""A request as ``bench-gate show`` prints it: what the console's request page shows, in
the same words, each said once."""

from __future__ import annotations

import re
from typing import Any

from ._cli_common import echo, until
from .states import UNDECIDED
from .texts import visible

__all__ = ["said", "summary"]

#: How many of the run's recent commands ``show`` prints (what the run already did).
RECENT = 5


def said(tk: dict[str, Any], message: str = "") -> str:
    """One line for a request's status and outcome, the status said once: ``tk-…:
    executed: VOLT 5,(@1)``, ``tk-…: denied by olga: not on this DUT``."""
    status = str(tk["status"])
    words = tk.get("outcome") or message
    if not words:
        return f"{tk['id']}: {status}"
    if re.split(r"[\s:;,]", words, maxsplit=1)[0] == status:  # "approved; it runs when…"
        return f"{tk['id']}: {words}"  # the outcome starts with its status already
    return f"{tk['id']}: {status}: {words}"


def _line(label: str, text: str) -> None:
    """One labelled line: a line break in ``text`` is escaped, never a line of its own (a
    rationale could otherwise print a line that looks like an action)."""
    echo(f"  {label:<13} {visible(str(text), lines=False)}")


def _margins(h: dict[str, Any]) -> None:
    for m in (h.get("risk") or {}).get("envelope") or []:
        _line("margin", m.get("words") or f"CH{m['channel']} {m['field']} {m['value']} of "
                        f"limit {m['limit']}: margin {m['margin']} ({m['marginPct']:.0f}%)")


def _setpoints(tk: dict[str, Any], h: dict[str, Any]) -> None:
    """The setpoint approval an energize stands on, or the one it still needs."""
    needed = h.get("setpointNeeded") if "setpoint" in tk["approvalsMissing"] else None
    # Each value with its unit as the server shows it (a gateway before it: the raw value).
    needed = h.get("setpointNeededShown") or needed if needed else None
    for need in needed or []:
        # Every field under the envelope (an SMU's level and limit in both functions too).
        values = ", ".join(f"{k} {v}" for k, v in need.items() if k != "channel")
        sets = any(a.get("channel") == need["channel"] and a.get("effect") == "setpoint"
                   for a in h.get("actions") or [])
        _line("setpoint", f"CH{need['channel']} {values}: not set here and not approved "
                          "before, so the setpoint approval approves it as it is" if sets else
                          f"CH{need['channel']} has no approved setpoint in force: this "
                          f"request needs a setpoint approval too ({values})")
    for cover in h.get("setpointCover") or []:
        for f in cover.get("fields") or []:
            by = f.get("by")
            who = ", ".join(by) if isinstance(by, list) else str(by or "?")
            _line("setpoint", f"CH{cover['channel']} {f['field']} "
                              f"{f.get('shown') or f.get('value')} approved "
                              f"by {who} at {f.get('at') or '?'} in {f.get('request') or '?'}")


def _stale(tk: dict[str, Any], h: dict[str, Any]) -> None:
    earlier = tk.get("supersedes") or "the earlier request"
    pairs = h.get("staleDiff") or {}
    words = h.get("staleDiffWords") or [f"{k}: {[*v, None, None][0]} → {[*v, None, None][1]}"
                                        for k, v in pairs.items()]
    for said_ in words:
        _line("changed", f"{said_} (since {earlier} was approved; this is its fresh request)")
    if tk.get("supersededBy"):
        _line("fresh", f"{tk['supersededBy']} (bench-gate show {tk['supersededBy']})")


def _receipt(tk: dict[str, Any], proposed: dict[str, Any]) -> None:
    """What was sent and read back: the fields it set, and any other that moved."""
    r = tk.get("receipt")
    if not r:
        return
    _line("sent", "; ".join(r.get("sent") or []) or "nothing")
    for ln in r.get("lines") or []:  # what the gateway added on the wire, or kept back
        if ln.get("why"):
            _line("", f"{ln['text']}: {ln['why']}")
    after = r.get("after") or {}
    before = r.get("before") or {}
    read = [f"{k} {before[k]} → {v}" if k in before and before[k] != v else f"{k} {v}"
            for k, v in sorted(after.items())
            if k in proposed or (k in before and before[k] != v)]
    _line("read back", ", ".join(read) or "-")
    if r.get("detail"):
        _line("answer", str(r["detail"]))


def summary(tk: dict[str, Any]) -> None:
    """A request as a reviewer reads it (``show``, and what ``approve``/``deny`` decide)."""
    h = tk.get("handoff") or {}
    run = h.get("run") or {}
    echo(f"{tk['id']}  {tk['status'].upper()}  on {tk['instrument']}  (run {tk['runId']})")
    _line("command", tk["message"])
    for e in h.get("edited") or []:  # an approver's edit: what runs is no longer the above
        changed = ", ".join(f"{k}={v}" for k, v in (e.get("edits") or {}).items())
        _line("edited", f"by {e.get('by')} at {e.get('at')}: {changed}; what runs now: "
                        f"{'; '.join(e.get('commands') or [])} (not the command as sent)")
    _line("requester", f"{run.get('principal')} ({run.get('kind')}), goal: "
                       f"{h.get('goal') or '-'}")
    _line("rationale", h.get("rationale") or "-")
    echo("  actions")
    for a in h.get("actions", []):
        echo(f"    - {visible(str(a.get('words') or a.get('canonical')), lines=False)}")
    for words in (h.get("plan") or {}).get("words") or []:
        _line("plan", words)
    _line("reversibility", h.get("reversibility", "-"))
    for signal in (h.get("risk") or {}).get("signals", []):
        _line("risk", signal)
    _margins(h)
    for e in (h.get("history") or [])[-RECENT:]:
        _line("earlier", f"{e.get('at')}  {e.get('command') or e.get('type')}"
                         + (f" ({e['status']})" if e.get("status") else ""))
    # Each change with its label and unit, as the console's table shows it.
    for words in h.get("diffWords") or [f"{k}: {old} → {new}"
                                        for k, (old, new) in (h.get("diff") or {}).items()]:
        _line("change", words)
    _stale(tk, h)
    _setpoints(tk, h)
    _line("required", ", ".join(tk["required"]))
    for a in tk["approvalsGiven"]:
        notes = f": {a['notes']}" if a.get("notes") else ""
        _line("approved", f"{a['kind']} by {a['by']} at {a['at']}{notes}")
    if tk["status"] in UNDECIDED:
        _line("missing", ", ".join(tk["approvalsMissing"]) or "-")
        _line("expires", f"{tk['expiresAt']} (in {until(tk['expiresAt'])})")
    else:
        _line("outcome", said(tk).partition(": ")[2])
        if tk.get("decidedAt"):
            _line("decided", str(tk["decidedAt"]))
        _receipt(tk, h.get("proposed") or {})
    _line("proposal", tk["proposalHash"])
