"""What classification yields, and how the gateway renders it: :class:`Unit` (one atomic,
canonical message unit with its effect), :class:`Classification` (a message's units), and
the renderers that write every value, string and block the way the gateway sends it.

A public module: the renderers are looked up here at every rendering, so a test can stand
a faulty one in and see the last guard (``check_rendering``) refuse what it writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from ._lexer import ChannelList, CharData, Data, Expression, Number, QuotedString
from ._schema import Effect, ParamSpec

__all__ = [
    "Classification",
    "Unit",
    "Value",
    "format_number",
    "magnitude",
    "quote",
    "render_data",
    "render_param",
    "render_value",
]

Value = Decimal | bool | int | str


@dataclass(frozen=True, slots=True)
class Unit:
    """One atomic, canonical message unit with its effect."""

    source: int  # index of the message unit, as the client sent it, that this came from
    position: int  # column of that unit in the message (0-based)
    text: str  # that unit as sent
    header: str  # canonical header, with '?' for a query
    query: bool
    effect: Effect
    channel: int | None
    field: str | None
    value: Value | None  # the new value of ``field`` for a write
    canonical: str
    local: bool = False  # answered by the gateway itself, never sent (``*CLS``)
    note: str = ""  # for ``excites``: what the instrument applies to whatever is connected
    #: Makes a meter measure with the function configured now (scpi/_excitation.py).
    measures: bool = False
    #: For a command that stores levels a later trigger applies (a list's points, a
    #: triggered level, a sweep): each field and the largest magnitude it names, judged
    #: against the envelope like a setpoint, though the unit sets no field now.
    reach: tuple[tuple[str, Decimal], ...] = ()

    @property
    def writes(self) -> bool:
        return self.effect not in (Effect.READ, Effect.SELECT)


@dataclass(frozen=True, slots=True)
class Classification:
    message: str
    profile: str
    units: tuple[Unit, ...]
    selected: int | None  # the selected channel after this message

    @property
    def read_only(self) -> bool:
        """Every unit reads, or selects a channel for reads that follow it."""
        select_pending = False
        for unit in self.units:
            if unit.effect is Effect.READ:
                select_pending = False
            elif unit.effect is Effect.SELECT:
                select_pending = True
            else:
                return False
        return bool(self.units) and not select_pending

    @property
    def effects(self) -> frozenset[Effect]:
        return frozenset(u.effect for u in self.units)

    @property
    def canonical(self) -> tuple[str, ...]:
        return tuple(u.canonical for u in self.units)


def format_number(value: Decimal) -> str:
    """Plain decimal with a point: ``5.0``, ``0.1``, ``0.000001``; never an exponent."""
    if value == 0:
        return "0.0"
    text = format(value, "f")  # exact: normalize() would round to the context's 28 digits
    if "." not in text:
        return text + ".0"
    text = text.rstrip("0")
    return text + "0" if text.endswith(".") else text


def render_value(value: Value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, Decimal):
        return format_number(value)
    return str(value)


def quote(text: str) -> str:
    """String data (IEEE 488.2 §7.7.5), a quote inside it doubled."""
    return '"' + text.replace('"', '""') + '"'


def _block(data: str) -> str:
    """Definite arbitrary block data (IEEE 488.2 §7.7.6.2), whatever form it came in."""
    length = str(len(data))
    return f"#{len(length)}{length}{data}"


def render_param(spec: ParamSpec, value: Value) -> str:
    """A known header's parameter: strings quoted and blocks definite, so each stays one datum."""
    if spec.type == "string":
        return quote(str(value))
    if spec.type == "block":
        return _block(str(value))
    return render_value(value)


def render_data(datum: Data) -> str:
    """Render a parameter of a header the profile does not know, in a normalised form."""
    if isinstance(datum, Number):
        return format_number(datum.value) + datum.suffix
    if isinstance(datum, CharData):
        return datum.text
    if isinstance(datum, QuotedString):
        return quote(datum.text)
    if isinstance(datum, ChannelList):
        return "(@" + ",".join(str(c) for c in datum.channels) + ")"
    if isinstance(datum, Expression):
        return "(" + datum.text + ")"
    return _block(datum.data)


def magnitude(raw: str | None) -> Decimal | None:
    """How far a field's value is from 0: a number's magnitude, or the largest of a list's
    points (``3,-20`` is 20: ``FieldSpec.points``). None when any part is no finite number
    (unread, garbled, empty): it cannot be shown inside."""
    if raw is None:
        return None
    try:
        values = [Decimal(part) for part in raw.split(",")]
    except InvalidOperation:
        return None
    if not all(v.is_finite() for v in values):
        return None
    return max(abs(v) for v in values)
