"""A connection's own status units: the units of a message the door answers itself, in
their place among the instrument's answers, so a compound query answers as one instrument
would (IEEE 488.2 §8.4.1: the answers of one message joined by ``;``).

The instrument's error queue and status registers are shared by every client, while a
gateway refusal is this connection's alone (``_errors.py``). While the connection holds
errors or event bits of its own, every unit below is answered from both, in message order,
whatever its spelling or position (``*OPC?;:SYST:ERR:NEXT?``, ``*ESR?;SYST:ERR?``):

- ``SYSTem:ERRor[:NEXT]?`` / ``:CODE[:NEXT]?`` (SCPI-99 vol. 2, 21.8): the oldest of this
  connection's errors; an error the instrument answered meanwhile joins the queue's end,
  so none is lost and the order stays oldest first.
- ``SYSTem:ERRor:COUNt?`` / ``:ALL?`` / ``:CODE:ALL?``: the instrument's and this queue's.
- ``*ESR?`` (IEEE 488.2 §11.5.1): the instrument's bits or'ed with this connection's (a
  -1xx sets CME, -2xx EXE, -3xx DDE, -4xx QYE); reading clears this connection's.
- ``*STB?`` (§11.2): the instrument's byte, with bit 2 (the error queue not empty:
  SCPI-99 vol. 1, ch. 9; "Error Queue" in Keysight's Status Byte tables), ESB (bit 5) and
  MSS (bit 6) for this connection's own errors and events.
- ``*CLS`` (local, never sent) empties this connection's queue and event bits;
  ``SYSTem:CLEar`` (local where a profile says so) empties its queue.

Which units these are comes from the classification with the connection's profile, so a
spelling the profile does not know is refused or held as any other unit. Nothing here runs
unless the connection holds something of its own: otherwise the instrument's answers are
already right, and the read path is untouched.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import GatewayError
from ..scpi import ERROR_NAMES, Effect, ProfileError, ScpiError, classify, is_read_only
from ..states import Outcome
from . import _gate as gate

if TYPE_CHECKING:
    from ._door import Connection
    from ._errors import ErrorQueue

__all__ = ["Role", "StatusPlan", "split_answers", "status_plan"]

logger = logging.getLogger("bench_gate.proxy._door")


class Role(enum.Enum):
    NEXT = "next"
    CODE = "code"
    COUNT = "count"
    ALL = "all"
    CODE_ALL = "code-all"
    ESR = "esr"
    STB = "stb"
    CLEAR = "clear"  # *CLS: the queue and the event bits
    CLEAR_QUEUE = "clear-queue"  # SYSTem:CLEar: the error queue only


#: The standard headers (canonical, as the classifier names them) of the status units.
ROLES: dict[str, Role] = {
    "SYST:ERR?": Role.NEXT, "SYST:ERR:NEXT?": Role.NEXT,
    "SYST:ERR:CODE?": Role.CODE, "SYST:ERR:CODE:NEXT?": Role.CODE,
    "SYST:ERR:COUN?": Role.COUNT, "SYST:ERR:ALL?": Role.ALL,
    "SYST:ERR:CODE:ALL?": Role.CODE_ALL,
    "*ESR?": Role.ESR, "*STB?": Role.STB,
    "*CLS": Role.CLEAR, "SYST:CLE": Role.CLEAR_QUEUE,
}
#: Answered from the queue alone while it holds an entry for them: no round trip.
_FROM_QUEUE = (Role.NEXT, Role.CODE)
#: Status byte bits (IEEE 488.2 §11.2.1; bit 2, the error queue: SCPI-99 vol. 1, ch. 9).
EAV, ESB, MSS = 4, 32, 64


@dataclass(frozen=True, slots=True)
class StatusPlan:
    """One message's answering units in order, each with its role (None: the instrument's
    answer, passed on as it is). Units that answer nothing but clear (``*CLS``) are kept
    with ``answers`` False."""

    units: tuple[tuple[Role | None, bool], ...]

    @property
    def answered(self) -> int:
        return sum(1 for _, answers in self.units if answers)

    def from_queue(self, queue: ErrorQueue) -> bool:
        """Every unit is an error read the queue can answer without the instrument."""
        return all(role in _FROM_QUEUE for role, _ in self.units) and \
            len(queue.items) >= len(self.units)


def status_plan(profile: str, message: str) -> StatusPlan | None:
    """The message's answering units on ``profile``, with the roles of those the door
    answers; None when none is one (or the message does not classify: the core refuses or
    holds it as ever)."""
    try:
        units = classify(message, profile).units
    except (ScpiError, ProfileError):
        return None
    sources: dict[int, tuple[Role | None, bool]] = {}
    for unit in units:
        # A query the profile reads, a clear the profile keeps local: never a held one.
        known_here = unit.local or (unit.query and unit.effect is Effect.READ)
        role = ROLES.get(unit.header) if known_here else None
        answers = unit.query and not unit.local
        known = sources.get(unit.source)
        if known is None:
            sources[unit.source] = (role, answers)
        else:  # one unit as sent, several canonical ones (a channel list)
            sources[unit.source] = (None, known[1] or answers)
    if not any(role is not None for role, _ in sources.values()):
        return None
    return StatusPlan(tuple(sources.values()))


def split_answers(response: str) -> list[str]:
    """A response message cut at its top-level ``;`` (IEEE 488.2 §8.4.1): never inside a
    string (§8.7.8, either quote, doubled quotes included) nor an arbitrary block (§8.7.9;
    an indefinite one ``#0`` runs to the end)."""
    parts: list[str] = []
    start = i = 0
    quote: str | None = None
    n = len(response)
    while i < n:
        c = response[i]
        if quote is not None:
            if c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#" and i + 1 < n and response[i + 1].isdigit():
            digits = int(response[i + 1])
            if digits == 0:
                break
            length = response[i + 2:i + 2 + digits]
            if len(length) == digits and length.isdigit():
                i += 2 + digits + int(length)
                continue
        elif c == ";":
            parts.append(response[start:i])
            start = i + 1
        i += 1
    parts.append(response[start:])
    return parts


def _code(entry: str) -> str:
    return entry.split(",", 1)[0]


def _int(text: str) -> int | None:
    try:
        return int(float(text.strip()))
    except ValueError:
        return None


def _like(template: str, value: int) -> str:
    """``value`` written as the instrument writes its numbers (``+0`` or ``0``)."""
    return f"+{value}" if template.strip().startswith("+") and value >= 0 else str(value)


def _none(answer: str | None) -> bool:
    code = None if answer is None else _int(_code(answer))
    return code is None or code == 0


async def _masks(conn: Connection) -> tuple[int, int]:
    """The instrument's ``*ESE?`` and ``*SRE?`` now (0 for one it does not answer)."""
    out = []
    for query in ("*ESE?", "*SRE?"):
        value = 0
        if is_read_only(query, conn.door.profile):  # never a held request of our own
            try:
                r = await conn.gateway.submit(conn.ensure_run(), conn.instrument, query,
                                              origin="gateway")
                if r.status is Outcome.EXECUTED:
                    value = _int(r.response or "") or 0
            except GatewayError:  # a mask unknown adds no summary bit
                value = 0
        out.append(value)
    return out[0], out[1]


async def answer(conn: Connection, plan: StatusPlan, response: str | None) -> str:
    """The message's answer with its status units answered in order from this connection's
    queue and event bits and the instrument's answers (``response``; None: not asked)."""
    queue = conn.errors
    parts = split_answers(response) if response else []
    if response is not None and len(parts) != plan.answered:
        logger.warning("%s door: %d answers for %d queries; passed on as they are",
                       conn.instrument, len(parts), plan.answered)
        return response
    out: list[str] = []
    it = iter(parts)
    for role, answers in plan.units:
        theirs = next(it) if answers and response is not None else None
        mine = await _one(conn, queue, role, theirs)
        if answers:
            out.append(mine if mine is not None else theirs or "")
    return ";".join(out)


async def _one(conn: Connection, queue: ErrorQueue, role: Role | None,
               theirs: str | None) -> str | None:
    """One unit's answer (None: the instrument's, as it is)."""
    items = queue.items
    if role is Role.CLEAR:
        queue.clear()
    elif role is Role.CLEAR_QUEUE:
        items.clear()
    elif role in (Role.NEXT, Role.CODE) and items:
        mine = items.popleft()
        if not _none(theirs) and theirs is not None:  # the instrument's, kept in order
            queue.keep(theirs if role is Role.NEXT else gate.error_text(
                int(_code(theirs)), ERROR_NAMES.get(int(_code(theirs)), "Error")))
        return mine if role is Role.NEXT else _code(mine)
    elif role is Role.COUNT and items and theirs is not None:
        count = _int(theirs)
        return None if count is None else _like(theirs, count + len(items))
    elif role in (Role.ALL, Role.CODE_ALL) and items:
        entries = list(items) if role is Role.ALL else [_code(e) for e in items]
        items.clear()
        if theirs is not None and not _none(theirs):  # already in the unit's own form
            entries.append(theirs)
        return ",".join(entries)
    elif role is Role.ESR and theirs is not None and queue.events:
        value = _int(theirs)
        bits, queue.events = queue.events, 0
        return None if value is None else _like(theirs, value | bits)
    elif role is Role.STB and theirs is not None and (items or queue.events):
        value = _int(theirs)
        if value is None:
            return None
        added = EAV if items else 0
        ese, sre = await _masks(conn)
        if queue.events & ese:
            added |= ESB
        if (value | added) & sre & ~MSS:
            added |= MSS
        return _like(theirs, value | added)
    return None
