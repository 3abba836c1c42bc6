"""Judge a write from its read-back: what the instrument says now against what was shown
and what was expected. One pure function, used after a write and after a restart.

The rules (docs/takeover.md, "Receipts"):
- ``executed``: every expected change read back, nothing else moved, no error; or, for a
  command whose effect cannot be predicted, no error (every change it made is listed).
- ``failed``: something went wrong and nothing took effect: the read-back equals the
  snapshot and no command is beyond a read-back's reach.
- ``ambiguous``: anything else: a partial change, a change nobody expected, an error with a
  command no read-back can confirm, or no read-back at all. A person must check.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = ["Judgement", "Verdict", "judge_readback"]


class Verdict(enum.Enum):
    EXECUTED = "executed"
    FAILED = "failed"
    AMBIGUOUS = "ambiguous"


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: Verdict
    detail: str  # one clause, no status word: "read back 2 of 2 changes"
    reconciled: bool = False  # an error happened, the read-back settled it
    #: Fields that moved to a value nobody proposed: field -> (shown, read back).
    unexpected: dict[str, tuple[str | None, str]] = field(default_factory=dict)


def _changes(moved: dict[str, tuple[str | None, str]]) -> str:
    return ", ".join(f"{k} {a} → {b}" for k, (a, b) in moved.items())


def judge_readback(*, before: dict[str, str], expected: dict[str, str],
                   after: dict[str, str] | None, unverifiable: list[str], blind: bool,
                   error: str | None, instrument_errors: list[str],
                   read_error: str | None = None) -> Judgement:
    """``before`` is the snapshot shown, ``expected`` that snapshot with every action
    applied, ``after`` the read-back (None if it failed). ``blind``: a command's effect on
    setpoints and outputs cannot be predicted (``*RCL``), so every change is reported
    rather than judged. ``unverifiable``: commands no read-back can confirm."""
    problems = "; ".join(filter(None, [
        error and f"the write failed ({error})",
        ("instrument reported " + ", ".join(instrument_errors)) if instrument_errors else None,
    ]))
    if after is None:
        why = "; ".join(filter(None, [problems, read_error])) or "read-back failed"
        return Judgement(Verdict.AMBIGUOUS,
                         f"the instrument could not be read back after the write ({why})")
    changed = [k for k in expected if expected[k] != before.get(k)]
    took = [k for k in changed if after.get(k) == expected[k]]
    moved = {k: (before.get(k), after[k]) for k in before
             if k in after and after[k] != before[k]}
    unexpected = {k: v for k, v in moved.items()
                  if k not in changed or after[k] != expected[k]}
    counted = f"read back {len(took)} of {len(changed)} changes"
    # A change no query can read (the SPD3303X's CH3 output) is unconfirmed, never "failed".
    unread = [k for k in changed if k not in after]
    if unread:
        counted += f"; no query reads {', '.join(unread)}"
    if blind and unexpected:
        counted += f"; read back {_changes(unexpected)}"
    elif unexpected:
        counted += f"; changes nobody proposed: {_changes(unexpected)}"
    if not problems:
        if len(took) == len(changed) and (blind or not unexpected):
            return Judgement(Verdict.EXECUTED, counted, unexpected=unexpected)
        if not moved and not unverifiable and not blind and not unread:
            return Judgement(Verdict.FAILED, f"nothing took effect ({counted})")
        return Judgement(Verdict.AMBIGUOUS, counted, unexpected=unexpected)
    detail = f"{problems}; {counted}"
    settled = error is not None  # an I/O error, settled by reading the instrument back
    if not moved and not unverifiable and not blind and not unread:
        return Judgement(Verdict.FAILED, f"{detail}; nothing took effect", reconciled=settled)
    if unverifiable or blind:
        return Judgement(Verdict.AMBIGUOUS,
                         f"{detail}; {', '.join(unverifiable) or 'the command'} cannot be "
                         "confirmed by a read-back", reconciled=settled, unexpected=unexpected)
    if len(took) == len(changed) and not unexpected and not instrument_errors:
        return Judgement(Verdict.EXECUTED, detail, reconciled=True)
    return Judgement(Verdict.AMBIGUOUS, detail, reconciled=error is not None,
                     unexpected=unexpected)
