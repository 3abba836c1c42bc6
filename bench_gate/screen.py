"""The screen: what a submitted message never gets past, before it is classified. A token
is never journaled or sent to an instrument, and the socket door's own GATE commands never
reach one through another door.
"""

from __future__ import annotations

from .auth import carries_token
from .scpi import ScpiError, lex

__all__ = ["door_only"]


def door_only(message: str, rationale: str | None) -> tuple[int, str] | None:
    """Refuse what must never be journaled or reach an instrument: a token, or the socket
    door's own GATE commands sent through another door."""
    if carries_token(message) or carries_token(rationale):
        return (-203, "the message carries a bench-gate token; a token is never journaled "
                      "or sent to an instrument: present it in the Authorization header "
                      "(HTTP) or with GATE:TOK on the socket door")
    try:
        units = lex(message)
    except ScpiError:
        return None  # the classifier reports the syntax error
    if any(not u.common and u.mnemonics[0] == "GATE" for u in units):
        return (-113, "GATE commands belong to the socket door; they are never sent to an "
                      "instrument")
    return None
