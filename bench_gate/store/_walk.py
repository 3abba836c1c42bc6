"""Verifying the journal's hash chain: a walk in seq order that stops at the first bad
event and says why (an edit, a gap, a relinked or reordered event, a head that is not the
recorded one), for a store with its archive or for a file (``_audit.py``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from ._chain import GENESIS, Link

__all__ = ["ChainReport", "Problem", "Walker"]


class Problem(enum.StrEnum):
    """Why a chain is not intact, at its first bad seq."""

    EDITED = "edited"  # the event's fields no longer give its hash
    MISSING = "missing"  # events are gone: the next one's prev-hash names another
    RELINKED = "relinked"  # no gap, but the prev-hash is not the previous event's hash
    OUT_OF_ORDER = "out-of-order"  # a seq not above the one before
    HEAD = "head"  # the last event is not the head the store recorded
    SEGMENT = "segment"  # an archived segment is missing, unreadable or not the one recorded


@dataclass(slots=True)
class ChainReport:
    """The outcome of walking a chain (a store with its archive, or a file)."""

    intact: bool = True
    events: int = 0
    head_seq: int = 0
    head: str = GENESIS
    first_bad_seq: int | None = None
    problem: Problem | None = None
    detail: str = ""
    archived: int = 0
    segments: int = 0
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.intact:
            text = f"intact, {self.events} events, head {self.head}"
            if self.segments:
                text += (f" ({self.archived} of them archived in {self.segments} "
                         f"segment{'s' if self.segments != 1 else ''})")
            return text
        return f"broken at seq {self.first_bad_seq}: {self.detail}"

    def as_json(self) -> dict[str, Any]:
        return {"intact": self.intact, "events": self.events, "headSeq": self.head_seq,
                "head": self.head, "firstBadSeq": self.first_bad_seq,
                "problem": self.problem.value if self.problem else None,
                "detail": self.detail or None, "archived": self.archived,
                "segments": self.segments, "summary": self.summary()}


class Walker:
    """Walks one chain in seq order and stops at the first bad event."""

    def __init__(self, seq: int = 0, prev: str = GENESIS) -> None:
        self.seq = seq  # the last good event's (0 before the first)
        self.prev = prev  # its hash
        self.report = ChainReport()

    def fail(self, seq: int, problem: Problem, detail: str) -> bool:
        if self.report.intact:
            self.report.intact = False
            self.report.first_bad_seq = seq
            self.report.problem = problem
            self.report.detail = detail
        return False

    def feed(self, ev: Link) -> bool:
        """Check one event against the one before it; False once the chain is broken."""
        if not self.report.intact:
            return False
        if ev.seq <= self.seq:
            return self.fail(ev.seq, Problem.OUT_OF_ORDER,
                             f"seq {ev.seq} comes after seq {self.seq}")
        if ev.prev != self.prev:
            if ev.seq > self.seq + 1:
                gone = (f"seq {self.seq + 1}" if ev.seq == self.seq + 2
                        else f"seqs {self.seq + 1} to {ev.seq - 1}")
                return self.fail(self.seq + 1, Problem.MISSING,
                                 f"{gone} missing: seq {ev.seq}'s prev-hash {ev.prev[:16]}… "
                                 f"is not the hash of seq {self.seq} ({self.prev[:16]}…)")
            return self.fail(ev.seq, Problem.RELINKED,
                             f"seq {ev.seq}'s prev-hash {ev.prev[:16]}… is not the hash of "
                             f"seq {self.seq} ({self.prev[:16]}…): one of the two was "
                             "rewritten")
        if ev.expected() != ev.hash:
            return self.fail(ev.seq, Problem.EDITED,
                             f"seq {ev.seq} ({ev.type}, run {ev.run}) was edited: its "
                             f"fields no longer give its hash {ev.hash[:16]}…")
        self.seq, self.prev = ev.seq, ev.hash
        self.report.events += 1
        self.report.head_seq, self.report.head = ev.seq, ev.hash
        return True

    def end(self, head_seq: int, head: str) -> ChainReport:
        """The walk reached the store's recorded head (``head_seq``, ``head``)."""
        if self.report.intact and (self.seq, self.prev) != (head_seq, head):
            if self.seq < head_seq:
                gone = (f"seq {head_seq}" if head_seq == self.seq + 1
                        else f"seqs {self.seq + 1} to {head_seq}")
                self.fail(self.seq + 1, Problem.MISSING,
                          f"{gone} missing: the store's head is seq {head_seq} "
                          f"({head[:16]}…), the last event found is seq {self.seq}")
            else:
                self.fail(self.seq, Problem.HEAD,
                          f"the last event, seq {self.seq} ({self.prev[:16]}…), is not the "
                          f"store's recorded head, seq {head_seq} ({head[:16]}…)")
        if self.report.intact:
            self.report.head_seq, self.report.head = head_seq, head
        return self.report
