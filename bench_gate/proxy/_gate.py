"""The reserved ``GATE`` namespace: commands a script sends to the gateway itself.

They are parsed with the project's lexer and never forwarded to an instrument::

    GATE:TOKen "bg_..."     present a requester token (before the first instrument command)
    GATE:GOAL "text"        give this connection's run a goal;  GATE:GOAL? reads it back
    GATE:RATionale "text"   attach a rationale to the next write; GATE:RAT? reads it back
    GATE:CONFidence 0.8     attach a confidence (0..1) to the next write
    GATE:STATus?            the connection's latest held request: STATUS,"tk-...","text"
    GATE:RUN?               this connection's run id, quoted
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..scpi import RawUnit, ScpiExecutionError, ScpiSyntaxError, lex
from ..scpi._lexer import Number, QuotedString

__all__ = ["GateCommand", "GateOp", "error_text", "is_gate_message", "parse_gate", "quote"]

ROOT = "GATE"


class GateOp(enum.Enum):
    TOKEN = "TOK"
    GOAL = "GOAL"
    GOAL_QUERY = "GOAL?"
    RATIONALE = "RAT"
    RATIONALE_QUERY = "RAT?"
    CONFIDENCE = "CONF"
    STATUS_QUERY = "STAT?"
    RUN_QUERY = "RUN?"


#: (long form, short form) of each leaf, as in a SCPI command tree.
_LEAVES: dict[str, tuple[str, str]] = {
    "TOKEN": ("TOKEN", "TOK"),
    "GOAL": ("GOAL", "GOAL"),
    "RATIONALE": ("RATIONALE", "RAT"),
    "CONFIDENCE": ("CONFIDENCE", "CONF"),
    "STATUS": ("STATUS", "STAT"),
    "RUN": ("RUN", "RUN"),
}

_SETS = {"TOKEN": GateOp.TOKEN, "GOAL": GateOp.GOAL, "RATIONALE": GateOp.RATIONALE,
         "CONFIDENCE": GateOp.CONFIDENCE}
_QUERIES = {"GOAL": GateOp.GOAL_QUERY, "RATIONALE": GateOp.RATIONALE_QUERY,
            "STATUS": GateOp.STATUS_QUERY, "RUN": GateOp.RUN_QUERY}


@dataclass(frozen=True, slots=True)
class GateCommand:
    op: GateOp
    text: str | None = None
    number: float | None = None

    @property
    def query(self) -> bool:
        return self.op.value.endswith("?")


def is_gate_message(message: str) -> bool:
    """A cheap test, before any lexing: does the message address the GATE namespace?"""
    head = message.lstrip(" \t:")
    return head[:4].upper() == ROOT


def _leaf(word: str, src: str, pos: int) -> str:
    for name, (long, short) in _LEAVES.items():
        if word == long or word == short:
            return name
    raise ScpiSyntaxError(-113, f"GATE has no command {word!r}; it has "
                          "TOK, GOAL, RAT, CONF, STAT?, RUN?", src, pos)


def _unit(unit: RawUnit, src: str) -> GateCommand:
    if unit.common or len(unit.mnemonics) != 2 or unit.mnemonics[0] != ROOT:
        raise ScpiSyntaxError(-113, "a GATE message holds only GATE:<command> units "
                              f"(found {unit.text!r})", src, unit.start)
    leaf = _leaf(unit.mnemonics[1], src, unit.start)
    if unit.query:
        op = _QUERIES.get(leaf)
        if op is None:
            raise ScpiSyntaxError(-113, f"GATE:{leaf} has no query form", src, unit.start)
        if unit.params:
            raise ScpiSyntaxError(-108, f"GATE:{leaf}? takes no parameter", src, unit.start)
        return GateCommand(op)
    op = _SETS.get(leaf)
    if op is None:
        raise ScpiSyntaxError(-113, f"GATE:{leaf} is a query only: send GATE:{leaf}?",
                              src, unit.start)
    if len(unit.params) != 1:
        raise ScpiSyntaxError(-109, f"GATE:{leaf} takes exactly one parameter, got "
                              f"{len(unit.params)}", src, unit.start)
    param = unit.params[0]
    if op is GateOp.CONFIDENCE:
        if not isinstance(param, Number) or param.suffix:
            raise ScpiSyntaxError(-104, "GATE:CONF takes a number from 0 to 1", src, param.pos)
        if not 0 <= param.value <= 1:
            raise ScpiExecutionError(-222, f"confidence {param.value} is outside 0..1",
                                     src, param.pos)
        return GateCommand(op, number=float(param.value))
    if not isinstance(param, QuotedString):
        raise ScpiSyntaxError(-104, f'GATE:{leaf} takes a quoted string: GATE:{leaf} "..."',
                              src, param.pos)
    return GateCommand(op, text=param.text)


def parse_gate(message: str) -> list[GateCommand]:
    """Every unit of a GATE message; raise :class:`ScpiError` on anything else."""
    units = lex(message)
    out = [_unit(u, message) for u in units]
    if not out:  # pragma: no cover - lex never returns no unit
        raise ScpiSyntaxError(-102, "empty message", message, 0)
    return out


def quote(text: str) -> str:
    """SCPI string response data (§8.7.8): double quotes, inner quotes doubled."""
    return '"' + text.replace('"', '""') + '"'


def error_text(code: int, message: str) -> str:
    return f"{code},{quote(message)}"

