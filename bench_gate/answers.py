"""An instrument's answer made canonical, so a value read now compares with one read
before (``+5.0E+00`` and ``5`` are one value): numbers, the profile's words for booleans,
status-register bits, lists of points. An answer that is not what its field holds is an
I/O failure, never a value.

An answer is the instrument's word, not the gateway's: it may be garbage, empty, binary, a
number of megabytes, SCPI's +INF/-INF/NaN (SCPI-99 §7.2.1.5), or a boolean that is neither
0 nor 1. None of those is a state: each is an I/O failure, so nothing is held, judged inside
or written on it, and what the error quotes of the answer is clipped (:func:`shown`): an
instrument's megabytes never become an outcome, a journal event or an alert (nor a key of
the answers a profile keeps: a failure is never kept)."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from .errors import InstrumentError
from .scpi import Profile, format_number

__all__ = ["ANSWERS_KEPT", "MAX_NUMBER", "MAX_TEXT", "SHOWN", "normalize", "shown"]

#: The longest numeric answer read as a number (IEEE 488.2 §8.7.4's NR3 needs ~20).
MAX_NUMBER = 64
#: The longest text a state field (or ``*IDN?``) is read as (IEEE 488.2 §4.1.3.6 keeps an
#: identification within 72 characters).
MAX_TEXT = 1024
#: How much of an answer an error quotes.
SHOWN = 80


def shown(answer: str, limit: int = SHOWN) -> str:
    """``answer`` quoted for an error: its repr, clipped to ``limit`` characters."""
    text = repr(answer)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(answer)} characters)"

#: Character response data (IEEE 488.2 §8.7.1): what a ``word`` field answers.
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


#: Canonical answers a profile keeps (:attr:`Profile.answers`) before it starts again.
ANSWERS_KEPT = 4096


def normalize(profile: Profile, fld: str, raw: str, where: str = "",
              channel: int | None = None) -> str:
    """An instrument's answer as a comparable canonical value (``+5.0E+00`` -> ``5.0``).
    A numeric field that answers no number (garbled, empty) is an I/O failure, never a value;
    so is a bit field with no bit for ``channel`` (it fails closed: maybe energized)."""
    key = (fld, raw, channel)
    known = profile.answers.get(key)
    if known is not None:
        return known
    value = _canonical(profile, fld, raw, where, channel)  # a failure is never kept
    if len(profile.answers) >= ANSWERS_KEPT:
        profile.answers.clear()
    profile.answers[key] = value
    return value


def _canonical(profile: Profile, fld: str, raw: str, where: str,
               channel: int | None) -> str:
    spec = profile.fields.get(fld)
    text = raw.strip().strip('"')
    if spec is not None and spec.word and not _WORD.fullmatch(raw.strip()):
        raise InstrumentError(f"{where or fld}: answer {shown(raw)} is not one word")
    if spec is None or spec.type == "text":
        if len(text) > MAX_TEXT:  # a list's points may be longer: each is a number
            raise InstrumentError(f"{where or fld}: answer {shown(raw)} is too long to be "
                                  "a setting")
        return text
    if spec.bits:
        try:
            return "1" if profile.register_bit(fld, channel, text) else "0"
        except ValueError as exc:
            raise InstrumentError(f"{where or fld}: answer {shown(raw)} unreadable: {exc}") from exc
    if spec.type == "boolean" and (word := profile.boolean(text)) is not None:
        return "1" if word else "0"  # the profile's words (DP800 guide: OUTP? answers ON)
    state = not spec.measured  # a setting, not a reading: SCPI's INF and NaN are no value
    if spec.points:  # a list's points (N6900 guide, LIST:VOLT?: values joined by ',')
        return ",".join(_number(raw, part, where or fld, state) for part in text.split(","))
    if spec.type == "boolean":
        # IEEE 488.2 §8.7.2 / SCPI-99 §7.3: a boolean answers 0 or 1. Anything else (2,
        # 9.91E37 = NaN) is no state: read as on, a protection's state passed its guard.
        flag = Decimal(_number(raw, text, where or fld, state))
        if flag not in (0, 1):
            raise InstrumentError(f"{where or fld}: answer {shown(raw)} is not a boolean (0 or 1)")
        return "1" if flag else "0"
    return _number(raw, text, where or fld, state)


#: SCPI-99 §7.2.1.5: +INF, -INF and NaN as an instrument answers them.
_SCPI_SPECIAL = {Decimal("9.9E37"): "+INF", Decimal("-9.9E37"): "-INF",
                 Decimal("9.91E37"): "NaN"}


def _number(raw: str, text: str, where: str, state: bool = True) -> str:
    """One number of an answer, canonical; anything else (empty, garbled) an I/O failure,
    and so, for a ``state`` field (a setting, not a reading), SCPI's +INF, -INF and NaN."""
    try:
        number = Decimal(text.strip()) if len(text) <= MAX_NUMBER else Decimal("NaN")
    except InvalidOperation:
        number = Decimal("NaN")
    if not number.is_finite():
        raise InstrumentError(f"{where}: answer {shown(raw)} is not a number")
    if state and number in _SCPI_SPECIAL:
        raise InstrumentError(f"{where}: answer {shown(raw)} is SCPI's {_SCPI_SPECIAL[number]} "
                              "(SCPI-99 7.2.1.5), not a setting")
    return format_number(number)
