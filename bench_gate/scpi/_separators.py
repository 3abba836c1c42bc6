"""The guard that keeps every unit one unit on the wire (DESIGN.md rule 1): no string or
block data a naive instrument parser would split a message at, and no canonical rendering
that is anything but exactly one unit.
"""

from __future__ import annotations

from ._errors import ScpiError, ScpiExecutionError, ScpiSyntaxError
from ._lexer import Block, ChannelList, QuotedString, RawUnit, lex
from ._params import ParamReader
from ._schema import FormSpec
from .units import Unit

__all__ = ["LINE_BREAKERS", "UNIT_BREAKERS", "check_data", "check_rendering", "check_wire"]

#: What a naive instrument parser splits a message at, or ends it at, whatever surrounds it:
#: ';' between units (IEEE 488.2 §7.4.1), LF and CR as terminators, NUL in C firmware. The
#: lexer refuses CR, LF and NUL anywhere in a message; ';' is refused here, inside string
#: data (§7.7.5) and block data (§7.7.6), which such a parser does not know.
UNIT_BREAKERS = frozenset(";\r\n\x00")
#: What ``separators_in_data: true`` still refuses inside data: it allows ';' only.
LINE_BREAKERS = UNIT_BREAKERS - {";"}


def check_data(reader: ParamReader, raw: RawUnit, form: FormSpec | None) -> None:
    """Refuse string or block data that a naive parser would split the message at."""
    breakers = LINE_BREAKERS if form is not None and form.separators_in_data else UNIT_BREAKERS
    for datum in raw.params:
        if isinstance(datum, QuotedString):
            text, code = datum.text, -151
        elif isinstance(datum, Block):
            text, code = datum.data, -161
        else:
            continue  # the lexer admits no ';' in numbers, words, lists or expressions
        if breakers.isdisjoint(text):
            continue
        bad = next(c for c in text if c in breakers)
        pos = reader.message.find(bad, datum.pos)
        if code == -151:
            detail = f"a {bad!r} inside string data would split the message on many instruments"
        else:
            detail = (f"many instruments do not parse block data, so a {bad!r} inside it "
                      "would split the message")
            if reader.message.startswith("#0", datum.pos):
                detail = "indefinite block data (#0) runs to the end of the message; " + detail
        raise reader.err(ScpiSyntaxError, code, detail, pos if pos >= 0 else datum.pos)


def check_rendering(reader: ParamReader, raw: RawUnit, unit: Unit, allow_semicolon: bool) -> None:
    """The last guard before anything can be sent (DESIGN.md rule 1): a canonical text is
    exactly one unit, to this lexer and to a parser that splits at every ';'."""
    text = unit.canonical
    breakers = LINE_BREAKERS if allow_semicolon else UNIT_BREAKERS
    try:
        one = breakers.isdisjoint(text) and len(lex(text)) == 1
    except ScpiError:
        one = False
    if not one:  # a renderer bug; the text is not echoed, it may hold what a client sent
        raise reader.err(ScpiSyntaxError, -100, f"the canonical rendering of {unit.header} "
                         "would not reach an instrument as exactly one unit", raw.start)


def check_wire(reader: ParamReader, raw: RawUnit, unit: Unit) -> None:
    """On an instrument that addresses its outputs by selection (``Profile.wire``), the only
    channel list a unit may carry is the one the gateway renders for a ``channel: list``
    form, sent as the select command. Any other (a parameter's data, an unknown header's
    list) cannot reach the instrument as rendered: refused now, never held and then sent
    without it, or not at all, once approved."""
    profile = reader.profile
    if profile.addressing is None or "(@" not in unit.canonical:
        return
    texts = profile.wire(unit.canonical)
    if texts is not None and not any(isinstance(d, ChannelList)
                                     for text in texts for u in lex(text) for d in u.params):
        return
    listed = next((d for d in raw.params if isinstance(d, ChannelList)), None)
    raise reader.err(ScpiExecutionError, -224, f"{unit.header}: this instrument addresses "
                     "its outputs by selection and takes no channel list here; select the "
                     "output first", listed.pos if listed is not None else raw.start)
