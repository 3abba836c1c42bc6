"""A pure-function lexer for one IEEE 488.2 program message (§7.3 to §7.7).

It knows nothing of any instrument: it splits a message into units, each with its
header mnemonics and its program data elements, and rejects anything malformed.
Resolving headers against a command tree is the profile's job (``_headers``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from ._errors import ScpiExecutionError, ScpiSyntaxError

__all__ = [
    "LONG_KEYWORDS",
    "MAX_MESSAGE_LENGTH",
    "Block",
    "ChannelList",
    "CharData",
    "Data",
    "Expression",
    "Number",
    "QuotedString",
    "RawUnit",
    "lex",
]

#: A fixed size limit; longer messages are refused, never truncated.
MAX_MESSAGE_LENGTH = 8192
#: IEEE 488.2 §7.6.1.4.1 and §7.7.1.4: mnemonics and character data are at most 12 chars.
MAX_MNEMONIC = 12
#: Header keywords over 12 letters that a loaded profile spells so, as its instrument's
#: guide does (the Keithley 2450's ``CONFiguration``, 13): the rule's one exception, or
#: the long form the profile lists would be refused -112 while its short form is judged.
LONG_KEYWORDS: set[str] = set()
MAX_EXPONENT = 100

# Whitespace per IEEE 488.2 §7.4.1.2 minus the control bytes we refuse anyway.
WHITESPACE = frozenset(" \t")
MNEMONIC_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
MNEMONIC_CHARS = MNEMONIC_START | frozenset("0123456789_")
NUMBER_START = frozenset("0123456789+-.")
QUOTES = frozenset("\"'")
EXPRESSION_EXCLUDED = frozenset("\"';")

RE_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[ \t]*[eE][ \t]*[+-]?\d+)?")
RE_SUFFIX = re.compile(r"[A-Za-z][A-Za-z/]*")
RE_NONDECIMAL = {
    "H": (re.compile(r"[0-9A-Fa-f]+"), 16),
    "Q": (re.compile(r"[0-7]+"), 8),
    "B": (re.compile(r"[01]+"), 2),
}
RE_NOT_PRINTABLE = re.compile(r"[^\t\x20-\x7e]")
RE_CHANNEL_ITEM = re.compile(r"[ \t]*(\d{1,4})(?:[ \t]*:[ \t]*(\d{1,4}))?[ \t]*")


@dataclass(frozen=True, slots=True)
class Number:
    """Decimal or non-decimal numeric program data, with its unit suffix as typed."""

    value: Decimal
    suffix: str = ""
    pos: int = 0


@dataclass(frozen=True, slots=True)
class _Text:
    """Program data kept as text; each kind below is its own class, so ``isinstance`` tells
    them apart."""

    text: str
    pos: int = 0


@dataclass(frozen=True, slots=True)
class CharData(_Text):
    """Character program data (§7.7.1), upper-cased: ``ON``, ``MAX``, ``CH1``."""


@dataclass(frozen=True, slots=True)
class QuotedString(_Text):
    """String program data (§7.7.5) with doubled quotes already collapsed."""


@dataclass(frozen=True, slots=True)
class ChannelList:
    """A SCPI channel list ``(@1,2:3)`` (SCPI-99 Vol. 1 §8.3.2), expanded in order."""

    channels: tuple[int, ...]
    pos: int = 0


@dataclass(frozen=True, slots=True)
class Expression(_Text):
    """Expression program data (§7.7.7) other than a channel list, kept as text."""


@dataclass(frozen=True, slots=True)
class Block:
    """Arbitrary block program data (§7.7.6), definite or indefinite."""

    data: str
    pos: int = 0


Data = Number | CharData | QuotedString | ChannelList | Expression | Block


@dataclass(frozen=True, slots=True)
class RawUnit:
    """One program message unit, lexed but not yet resolved against a profile."""

    index: int
    start: int
    end: int
    text: str
    absolute: bool  # header began with ':'
    common: bool  # IEEE 488.2 common command: '*IDN?'
    mnemonics: tuple[str, ...]  # upper-cased, numeric suffixes kept
    query: bool
    params: tuple[Data, ...]


def _clip(word: str) -> str:
    """An over-long word as shown in an error: never echo a pasted secret or 8 KB back."""
    return repr(word) if len(word) <= MAX_MNEMONIC else repr(word[:MAX_MNEMONIC]) + "..."


def _normalize(src: str) -> str:
    """Strip one terminator, then refuse anything that is not one printable ASCII message."""
    if src.endswith("\r\n"):
        src = src[:-2]
    elif src.endswith("\n"):
        src = src[:-1]
    if len(src) > MAX_MESSAGE_LENGTH:
        raise ScpiExecutionError(
            -223,
            f"message is {len(src)} characters, longer than the limit of {MAX_MESSAGE_LENGTH}",
            src[:80],
            MAX_MESSAGE_LENGTH,
        )
    bad = RE_NOT_PRINTABLE.search(src)
    if bad is not None:
        pos, ch = bad.start(), bad.group()
        if ch in "\r\n":
            raise ScpiSyntaxError(
                -102, "a line break inside a message: send one message per line", src, pos
            )
        raise ScpiSyntaxError(-101, f"character {ch!r} (0x{ord(ch):02X}) is not allowed", src, pos)
    return src


#: Only messages up to this long are cached (here and by the classifier). A long message can
#: expand to hundreds of units (about 110 KiB for 500), so caching every distinct one let a
#: client grow a cache to GBs.
CACHE_MAX_MESSAGE = 256


def lex(src: str) -> tuple[RawUnit, ...]:
    """Split one program message into units; raise :class:`ScpiSyntaxError` on bad input.
    Messages up to CACHE_MAX_MESSAGE characters are cached (units are immutable)."""
    return _lex(src) if len(src) > CACHE_MAX_MESSAGE else _lex_cached(src)


@functools.lru_cache(maxsize=4096)
def _lex_cached(src: str) -> tuple[RawUnit, ...]:
    return _lex(src)


def _lex(src: str) -> tuple[RawUnit, ...]:
    src = _normalize(src)
    units: list[RawUnit] = []
    pos = 0
    n = len(src)
    while True:
        pos, unit = _unit(src, _skip_ws(src, pos), len(units))
        units.append(unit)
        pos = _skip_ws(src, pos)
        if pos >= n:
            break
        if src[pos] != ";":  # pragma: no cover - _unit always stops at ';' or the end
            raise ScpiSyntaxError(-103, f"expected ';' but found {src[pos]!r}", src, pos)
        pos += 1
        if _skip_ws(src, pos) >= n:
            raise ScpiSyntaxError(-102, "empty message unit after ';'", src, pos)
    return tuple(units)


def _skip_ws(src: str, pos: int) -> int:
    while pos < len(src) and src[pos] in WHITESPACE:
        pos += 1
    return pos


def _unit(src: str, pos: int, index: int) -> tuple[int, RawUnit]:
    start = pos
    n = len(src)
    if pos >= n or src[pos] == ";":
        raise ScpiSyntaxError(-102, "empty message unit", src, pos)
    absolute = common = False
    mnemonics: list[str] = []
    if src[pos] == "*":
        common = True
        pos, mnem = _mnemonic(src, pos + 1)
        mnemonics.append(mnem)
    else:
        if src[pos] == ":":
            absolute = True
            pos += 1
        while True:
            pos, mnem = _mnemonic(src, pos)
            mnemonics.append(mnem)
            if pos < n and src[pos] == ":":
                pos += 1
                continue
            break
    query = False
    if pos < n and src[pos] == "?":
        query = True
        pos += 1
    params: list[Data] = []
    if pos < n and src[pos] not in WHITESPACE and src[pos] != ";":
        raise ScpiSyntaxError(-102, f"unexpected {src[pos]!r} after the header", src, pos)
    pos = _skip_ws(src, pos)
    if pos < n and src[pos] != ";":
        while True:
            pos, datum = _data(src, _skip_ws(src, pos))
            params.append(datum)
            pos = _skip_ws(src, pos)
            if pos >= n or src[pos] == ";":
                break
            if src[pos] != ",":
                raise ScpiSyntaxError(-103, f"expected ',' or ';' but found {src[pos]!r}", src, pos)
            pos += 1
            if _skip_ws(src, pos) >= n or src[_skip_ws(src, pos)] == ";":
                raise ScpiSyntaxError(-109, "a parameter is missing after ','", src, pos)
    text = src[start:pos].rstrip(" \t")
    unit = RawUnit(index, start, start + len(text), text, absolute, common,
                   tuple(mnemonics), query, tuple(params))
    return pos, unit


def _mnemonic(src: str, pos: int) -> tuple[int, str]:
    if pos >= len(src) or src[pos] not in MNEMONIC_START:
        found = repr(src[pos]) if pos < len(src) else "the end of the message"
        raise ScpiSyntaxError(-102, f"expected a header mnemonic but found {found}", src, pos)
    end = pos + 1
    while end < len(src) and src[end] in MNEMONIC_CHARS:
        end += 1
    word = src[pos:end]
    stem = word.rstrip("0123456789")
    if len(stem) > MAX_MNEMONIC and stem.upper() not in LONG_KEYWORDS:
        raise ScpiSyntaxError(-112, f"mnemonic {_clip(word)} is longer than 12 characters",
                              src, pos)
    return end, word.upper()


def _data(src: str, pos: int) -> tuple[int, Data]:
    ch = src[pos]
    if ch in QUOTES:
        return _string(src, pos)
    if ch == "#":
        return _hash(src, pos)
    if ch == "(":
        return _expression(src, pos)
    if ch in NUMBER_START:
        return _decimal(src, pos)
    if ch in MNEMONIC_START:
        end = pos + 1
        while end < len(src) and src[end] in MNEMONIC_CHARS:
            end += 1
        word = src[pos:end]
        if len(word) > MAX_MNEMONIC:
            raise ScpiSyntaxError(-144, f"character data {_clip(word)} is longer than 12",
                                  src, pos)
        return end, CharData(word.upper(), pos)
    raise ScpiSyntaxError(-101, f"unexpected {ch!r} where a parameter should start", src, pos)


def _string(src: str, pos: int) -> tuple[int, QuotedString]:
    quote = src[pos]
    out: list[str] = []
    i = pos + 1
    while i < len(src):
        if src[i] == quote:
            if i + 1 < len(src) and src[i + 1] == quote:  # doubled quote, §7.7.5.2
                out.append(quote)
                i += 2
                continue
            return i + 1, QuotedString("".join(out), pos)
        out.append(src[i])
        i += 1
    raise ScpiSyntaxError(-151, "string is not closed", src, pos)


def _decimal(src: str, pos: int) -> tuple[int, Number]:
    m = RE_DECIMAL.match(src, pos)
    if not m:
        raise ScpiSyntaxError(-121, "not a number", src, pos)
    text = m.group().replace(" ", "").replace("\t", "")
    try:
        value = Decimal(text)
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only valid forms
        raise ScpiSyntaxError(-121, f"not a number: {text!r}", src, pos) from exc
    exponent = value.adjusted()
    if value and abs(exponent) > MAX_EXPONENT:
        raise ScpiSyntaxError(-123, f"exponent of {text!r} is too large", src, pos)
    end = m.end()
    probe = _skip_ws(src, end)
    suffix = ""
    if probe < len(src) and src[probe] in MNEMONIC_START:
        sm = RE_SUFFIX.match(src, probe)
        assert sm is not None
        suffix = sm.group()
        if len(suffix) > MAX_MNEMONIC:
            raise ScpiSyntaxError(-134, f"suffix {_clip(suffix)} is too long", src, probe)
        end = sm.end()
    if end < len(src) and src[end] not in WHITESPACE and src[end] not in ",;":
        raise ScpiSyntaxError(-121, f"unexpected {src[end]!r} in a number", src, end)
    return end, Number(value, suffix, pos)


def _hash(src: str, pos: int) -> tuple[int, Number | Block]:
    if pos + 1 >= len(src):
        raise ScpiSyntaxError(-161, "'#' at the end of the message", src, pos)
    kind = src[pos + 1].upper()
    if kind in RE_NONDECIMAL:  # §7.7.4 non-decimal numeric
        regex, base = RE_NONDECIMAL[kind]
        m = regex.match(src, pos + 2)
        if not m:
            raise ScpiSyntaxError(-121, f"expected base-{base} digits after '#{kind}'", src, pos)
        value = Decimal(int(m.group(), base))
        if value.adjusted() > MAX_EXPONENT:
            raise ScpiSyntaxError(-123, f"'#{kind}' number has too many digits", src, pos)
        return m.end(), Number(value, "", pos)
    if kind == "0":  # indefinite block: the rest of the message, §7.7.6.2
        return len(src), Block(src[pos + 2 :], pos)
    if kind.isdigit():
        width = int(kind)
        digits = src[pos + 2 : pos + 2 + width]
        if len(digits) != width or not digits.isdigit():
            raise ScpiSyntaxError(-161, f"block header expects {width} length digits", src, pos)
        length = int(digits)
        start = pos + 2 + width
        if start + length > len(src):
            raise ScpiSyntaxError(
                -161, f"block says {length} bytes but {len(src) - start} follow", src, pos
            )
        return start + length, Block(src[start : start + length], pos)
    raise ScpiSyntaxError(-161, f"unexpected {src[pos + 1]!r} after '#'", src, pos)


def _expression(src: str, pos: int) -> tuple[int, ChannelList | Expression]:
    close = src.find(")", pos)
    if close < 0:
        raise ScpiSyntaxError(-171, "expression is not closed with ')'", src, pos)
    body = src[pos + 1 : close]
    if "(" in body:
        raise ScpiSyntaxError(-171, "nested expressions are not supported", src, pos)
    bad = next((c for c in body if c in EXPRESSION_EXCLUDED), None)
    if bad is not None:  # §7.7.7.2: an instrument would split or quote where we do not
        raise ScpiSyntaxError(-171, f"{bad!r} is not allowed inside an expression", src, pos)
    if not body.lstrip(" \t").startswith("@"):
        return close + 1, Expression(body, pos)
    items = body.lstrip(" \t")[1:]
    channels: list[int] = []
    for item in items.split(","):
        m = RE_CHANNEL_ITEM.fullmatch(item)
        if not m:
            raise ScpiSyntaxError(-171, f"bad channel list item {item.strip()!r}", src, pos)
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else first
        if last < first or last - first > 64:
            raise ScpiSyntaxError(-171, f"bad channel range {item.strip()!r}", src, pos)
        channels.extend(range(first, last + 1))
    return close + 1, ChannelList(tuple(channels), pos)
