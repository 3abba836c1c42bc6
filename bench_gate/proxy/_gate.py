"""The reserved ``GATE`` namespace: commands a script sends to the gateway itself.

They are parsed with the project's lexer and never forwarded to an instrument::

    GATE:TOKen "bg_..."     present a requester token (before the first instrument command)
    GATE:GOAL "text"        give this connection's run a goal;  GATE:GOAL? reads it back
    GATE:RATionale "text"   attach a rationale to the next write; GATE:RAT? reads it back
    GATE:CONFidence 0.8     attach a confidence (0..1) to the next write
    GATE:STATus?            the connection's latest held request: STATUS,"tk-...","text"
    GATE:RUN?               this connection's run id, quoted
    GATE:PLAN ["psu",](@1),<vmin>,<vmax>,<imax>,<step|NONE>,<ON|OFF>,<writes>,<minutes>
                            ask for a standing plan; the connection waits until it is decided
    GATE:STOP               the emergency stop: every instrument's safe action at once
    GATE:PLAN?              the connection's latest plan: STATUS,"plan-...",writes left,seconds
    GATE:HOLD WAIT|REFUSE   a held write waits for its decision, or is answered -203 at once
                            (resend it once approved); GATE:HOLD? reads it back
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ..errors import GatewayError
from ..models import Status
from ..scpi import ERROR_NAMES, RawUnit, ScpiExecutionError, ScpiSyntaxError, lex
from ..scpi._lexer import ChannelList, CharData, Data, Number, QuotedString
from ..states import PlanStatus
from ..wire import rfc3339

if TYPE_CHECKING:
    from ..gateway import Gateway

__all__ = ["GateCommand", "GateOp", "error_text", "is_gate_message", "parse_gate",
           "plan_status", "quote", "request_status", "scpi_message"]

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
    PLAN = "PLAN"
    PLAN_QUERY = "PLAN?"
    STOP = "STOP"
    HOLD = "HOLD"
    HOLD_QUERY = "HOLD?"


#: (long form, short form) of each leaf, as in a SCPI command tree.
_LEAVES: dict[str, tuple[str, str]] = {
    "TOKEN": ("TOKEN", "TOK"),
    "GOAL": ("GOAL", "GOAL"),
    "RATIONALE": ("RATIONALE", "RAT"),
    "CONFIDENCE": ("CONFIDENCE", "CONF"),
    "STATUS": ("STATUS", "STAT"),
    "RUN": ("RUN", "RUN"),
    "PLAN": ("PLAN", "PLAN"),
    "STOP": ("STOP", "STOP"),
    "HOLD": ("HOLD", "HOLD"),
}

_SETS = {"TOKEN": GateOp.TOKEN, "GOAL": GateOp.GOAL, "RATIONALE": GateOp.RATIONALE,
         "CONFIDENCE": GateOp.CONFIDENCE, "PLAN": GateOp.PLAN, "STOP": GateOp.STOP,
         "HOLD": GateOp.HOLD}
_QUERIES = {"GOAL": GateOp.GOAL_QUERY, "RATIONALE": GateOp.RATIONALE_QUERY,
            "STATUS": GateOp.STATUS_QUERY, "RUN": GateOp.RUN_QUERY,
            "PLAN": GateOp.PLAN_QUERY, "HOLD": GateOp.HOLD_QUERY}
#: GATE:PLAN's positional parameters after the optional quoted instrument, in order.
PLAN_FIELDS = ("channels", "voltage_min", "voltage_max", "current_max", "max_step",
               "output_enable", "max_writes", "timeout_minutes")
_PLAN_SYNTAX = ('GATE:PLAN ["psu",](@1),<vmin>,<vmax>,<imax>,<max step|NONE>,<ON|OFF>,'
                "<max writes>,<minutes>")
_BOOLEANS = {"ON": True, "OFF": False}
#: GATE:HOLD's words, and socket_door.on_hold's values they stand for.
HOLD_MODES = {"WAIT": "wait", "REFUSE": "refuse", "REF": "refuse"}


@dataclass(frozen=True, slots=True)
class GateCommand:
    op: GateOp
    text: str | None = None
    number: float | None = None
    #: GATE:PLAN's scope, in the core's names (``instrument`` only when the message named it).
    scope: dict[str, Any] | None = None

    @property
    def query(self) -> bool:
        return self.op.value.endswith("?")


#: A unit of the GATE namespace anywhere in a message: at its start or after a ';'.
_GATE_UNIT = re.compile(r"(?:^|;)[ \t]*:?[ \t]*GATE(?![A-Za-z0-9_])", re.IGNORECASE)


def is_gate_message(message: str) -> bool:
    """A cheap test, before any lexing: does any unit address the GATE namespace? Such a
    message is the door's own: it is never journaled nor sent on, even when mixed with
    instrument commands (``*IDN?;:GATE:TOK "bg_..."`` is refused, token unrecorded).
    A message with no G in it names no GATE unit: most reads (``VOLT? (@1)``, ``*IDN?``)
    skip the search (0.2 µs against 0.7, twice a message)."""
    if "G" not in message and "g" not in message:
        return False
    return _GATE_UNIT.search(message) is not None


def _leaf(word: str, src: str, pos: int) -> str:
    for name, (long, short) in _LEAVES.items():
        if word == long or word == short:
            return name
    raise ScpiSyntaxError(-113, f"GATE has no command {word!r}; it has "
                          "TOK, GOAL, RAT, CONF, STAT?, RUN?, PLAN, STOP, HOLD", src, pos)


def _unit(unit: RawUnit, src: str) -> GateCommand:
    if unit.common or len(unit.mnemonics) != 2 or unit.mnemonics[0] != ROOT:
        raise ScpiSyntaxError(-113, "a GATE message holds only GATE:<command> units; send "
                              f"GATE commands in their own message (unit {unit.index + 1} "
                              "is not one)", src, unit.start)
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
    if op is GateOp.STOP:
        if unit.params:
            raise ScpiSyntaxError(-108, "GATE:STOP takes no parameter", src, unit.start)
        return GateCommand(op)
    if len(unit.params) != 1 and op is not GateOp.PLAN:
        raise ScpiSyntaxError(-109, f"GATE:{leaf} takes exactly one parameter, got "
                              f"{len(unit.params)}", src, unit.start)
    param = unit.params[0]
    if op is GateOp.PLAN:
        return GateCommand(op, scope=_plan_scope(unit, src))
    if op is GateOp.HOLD:
        if not isinstance(param, CharData) or param.text not in HOLD_MODES:
            raise ScpiExecutionError(-224, "GATE:HOLD takes WAIT or REFUSE", src, param.pos)
        return GateCommand(op, text=HOLD_MODES[param.text])
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


def _number(param: Data, name: str, src: str, suffix: str = "") -> Decimal:
    """A plain number, or one with the field's own unit (``5V``, ``0.5A``)."""
    if not isinstance(param, Number):
        raise ScpiSyntaxError(-104, f"GATE:PLAN {name} must be a number, got {param!r}",
                              src, param.pos)
    if param.suffix and param.suffix.upper() != suffix:
        raise ScpiSyntaxError(-131, f"GATE:PLAN {name} takes "
                              + (f"no suffix or {suffix}" if suffix else "no suffix")
                              + f", not {param.suffix!r}", src, param.pos)
    return param.value


def _integer(param: Data, name: str, src: str) -> int:
    value = _number(param, name, src)
    if value != value.to_integral_value():
        raise ScpiSyntaxError(-104, f"GATE:PLAN {name} must be a whole number, got {value}",
                              src, param.pos)
    return int(value)


def _plan_scope(unit: RawUnit, src: str) -> dict[str, Any]:
    """``GATE:PLAN ["psu",](@1),0,5,0.5,0.25,ON,40,30`` as the core's plan scope."""
    params = list(unit.params)
    scope: dict[str, Any] = {}
    first = params[0] if params else None
    if isinstance(first, QuotedString):
        scope["instrument"] = first.text
        params.pop(0)
    if len(params) != len(PLAN_FIELDS):
        code = -109 if len(params) < len(PLAN_FIELDS) else -108
        raise ScpiSyntaxError(code, f"GATE:PLAN takes {len(PLAN_FIELDS)} parameters after "
                              f"the instrument, got {len(params)}: {_PLAN_SYNTAX}",
                              src, unit.start)
    chans, vmin, vmax, imax, step, enable, writes, minutes = params
    if isinstance(chans, ChannelList):
        scope["channels"] = list(chans.channels)
    else:
        scope["channels"] = [_integer(chans, "channels", src)]
    scope["voltage"] = [_number(vmin, "voltage_min", src, "V"),
                        _number(vmax, "voltage_max", src, "V")]
    scope["current_max"] = _number(imax, "current_max", src, "A")
    if isinstance(step, CharData) and step.text == "NONE":
        scope["max_step"] = None
    else:
        scope["max_step"] = _number(step, "max_step", src, "V")
    if isinstance(enable, CharData) and enable.text in _BOOLEANS:
        scope["output_enable"] = _BOOLEANS[enable.text]
    elif isinstance(enable, Number) and not enable.suffix and enable.value in (0, 1):
        scope["output_enable"] = enable.value == 1
    else:
        raise ScpiSyntaxError(-104, "GATE:PLAN output_enable is ON, OFF, 1 or 0",
                              src, enable.pos)
    scope["max_writes"] = _integer(writes, "max_writes", src)
    scope["timeout_minutes"] = _integer(minutes, "timeout_minutes", src)
    return scope


def parse_gate(message: str) -> list[GateCommand]:
    """Every unit of a GATE message; raise :class:`ScpiError` on anything else."""
    units = lex(message)
    out = [_unit(u, message) for u in units]
    if not out:  # pragma: no cover - lex never returns no unit
        raise ScpiSyntaxError(-102, "empty message", message, 0)
    return out


def quote(text: str) -> str:
    """SCPI string response data (§8.7.8): double quotes, inner quotes doubled, and 7-bit
    printable ASCII on one line: any other character (a byte over 0x7F the client sent, an
    operator's é or line break) as a ``\\xNN``/``\\uNNNN`` escape. pyvisa decodes answers as
    ASCII by default, and a line break would end the answer early."""
    shown = "".join(c if " " <= c <= "~" else _escaped(c) for c in text)
    return '"' + shown.replace('"', '""') + '"'


def _escaped(c: str) -> str:
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else (
        f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")


def error_text(code: int, message: str) -> str:
    return f"{code},{quote(message)}"


def scpi_message(code: int, reason: str) -> str:
    """``Command protected; ...``: the standard short text first, then the detail."""
    name = ERROR_NAMES.get(code, "Error")
    return reason if reason.startswith(name) else f"{name}; {reason}"


def plan_status(gateway: Gateway, plan_id: str | None) -> str:
    """GATE:PLAN?'s answer, ``ACTIVE,"plan-...",17,1795``: status, id, writes left, seconds
    left (0 unless active); ``NONE,"",0,0`` before any plan."""
    if plan_id is None:
        return 'NONE,"",0,0'
    try:
        plan = gateway.get_plan(plan_id)
    except GatewayError:
        return 'NONE,"",0,0'
    seconds = 0
    if plan.status is PlanStatus.ACTIVE and plan.expires_at is not None:
        seconds = max(0, int((plan.expires_at - gateway.clock()).total_seconds()))
    return f"{plan.status.value.upper()},{quote(plan.id)},{plan.writes_left},{seconds}"


def request_status(gateway: Gateway, request_id: str | None) -> str:
    """GATE:STAT?'s answer, ``PENDING,"tk-...","still needs: setpoint"``; ``NONE,"",""``
    before any hold."""
    if request_id is None:
        return 'NONE,"",""'
    try:
        req = gateway.get_request(request_id)
    except GatewayError as exc:
        return f'NONE,"",{quote(exc.message)}'
    if req.status is Status.PENDING:
        missing = req.missing()
        text = "waiting for a person: " + (", ".join(k.value for k in missing)
                                           or "decision")
    elif req.status is Status.APPROVED and req.on_resend:  # on_hold = refuse
        text = ("approved: resend the same command on this connection to run it, before "
                f"{rfc3339(req.expires_at)}")
    else:
        text = req.outcome or req.status.value
    return f"{req.status.value.upper()},{quote(req.id)},{quote(text)}"
