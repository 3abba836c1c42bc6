"""SCPI errors, numbered as in SCPI-99 Vol. 2 §21.8 (command errors -100..-199,
execution errors -200..-299). They are the gateway's refusals, so they sit in its one
exceptions tree (``bench_gate.errors``)::

    GatewayError
    └── Refused
        └── ScpiError
            ├── ScpiSyntaxError       (-100..-199: the message could not be read)
            └── ScpiExecutionError    (-200..-299: read, but the value or command is not allowed)
"""

from __future__ import annotations

from ..errors import Refused
from ..texts import RE_TOKEN_START, TOKEN_PREFIX

__all__ = [
    "ERROR_NAMES",
    "ScpiError",
    "ScpiExecutionError",
    "ScpiSyntaxError",
]

#: Standard short texts (SCPI-99 Vol. 2 §21.8).
ERROR_NAMES: dict[int, str] = {
    -100: "Command error",
    -101: "Invalid character",
    -102: "Syntax error",
    -103: "Invalid separator",
    -104: "Data type error",
    -108: "Parameter not allowed",
    -109: "Missing parameter",
    -112: "Program mnemonic too long",
    -113: "Undefined header",
    -114: "Header suffix out of range",
    -120: "Numeric data error",
    -121: "Invalid character in number",
    -123: "Exponent too large",
    -131: "Invalid suffix",
    -134: "Suffix too long",
    -138: "Suffix not allowed",
    -141: "Invalid character data",
    -144: "Character data too long",
    -148: "Character data not allowed",
    -150: "String data error",
    -151: "Invalid string data",
    -160: "Block data error",
    -161: "Invalid block data",
    -170: "Expression error",
    -171: "Invalid expression",
    -200: "Execution error",
    -203: "Command protected",
    -220: "Parameter error",
    -221: "Settings conflict",
    -222: "Data out of range",
    -223: "Too much data",
    -224: "Illegal parameter value",
    -240: "Hardware error",
    -350: "Queue overflow",
}


class ScpiError(Refused):
    """A SCPI message was refused; carries the SCPI error number and a reason, and reads as
    the instrument's error queue would say it (``-113,"Undefined header; ..."``)."""

    def __init__(self, code: int, detail: str, source: str = "", pos: int | None = None) -> None:
        self.name = ERROR_NAMES.get(code, "Error")
        # A token pasted into a message: none of its characters comes back (no SCPI word
        # of a shipped profile holds "bg_").
        detail = RE_TOKEN_START.sub(TOKEN_PREFIX + "…(withheld)", detail)
        self.detail = detail
        self.source = source
        self.pos = pos
        where = f" at column {pos + 1}" if pos is not None else ""
        super().__init__(code, f"{self.name}; {detail}{where}")
        self.args = (f'{code},"{self.message}"',)


class ScpiSyntaxError(ScpiError):
    """The message is not well-formed IEEE 488.2 / SCPI (error numbers -100..-199)."""


class ScpiExecutionError(ScpiError):
    """The message is well-formed, but a value or command is not allowed (-200..-299)."""
