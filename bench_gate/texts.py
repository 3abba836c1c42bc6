"""Free text people read (a goal, a rationale, a note, a question): only characters that
show as themselves.

A requester's rationale is shown to the approver beside the proposal, in the console and in
``bench-gate show``/``approve`` on a terminal. A control character there is an instruction
to that terminal (ESC [ 2 A moves the cursor up and the text after it overwrites the
command shown; ESC [ 8 m hides every line after it, the actions included), and a format
character (a direction override, a zero-width space) makes the words read otherwise than
they are. So the gateway takes none in (``hidden``) and a reader escapes any it is given
anyway (``visible``): what a person is shown is exactly what was written.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["RE_TOKEN", "RE_TOKEN_START", "TOKEN_PREFIX", "hidden", "redact", "visible"]

#: What a bench-gate token looks like (``bg_`` and at least 16 URL-safe characters).
TOKEN_PREFIX = "bg_"
RE_TOKEN = re.compile(re.escape(TOKEN_PREFIX) + r"[A-Za-z0-9_-]{16,}")


#: A token's prefix and whatever follows it, in any case: a SCPI error quotes a word clipped
#: to 12 characters (or cut at a '-'), too short for RE_TOKEN, and those are secret ones.
RE_TOKEN_START = re.compile(re.escape(TOKEN_PREFIX) + r"[A-Za-z0-9_-]*", re.IGNORECASE)


def redact(text: str | None) -> str | None:
    """The text with every token-shaped word withheld, for journals and messages."""
    return RE_TOKEN.sub(TOKEN_PREFIX + "…(withheld)", text) if text else text

#: Unicode categories of characters that do not show as themselves: controls (Cc), format
#: characters (Cf: bidi overrides, zero-width), surrogates, private use, unassigned, and
#: the line and paragraph separators some readers break lines at.
_UNSEEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


#: What each refused category is, for a name the Unicode database does not give.
_KIND = {"Cc": "a control character", "Cf": "a format character", "Cs": "a surrogate",
         "Co": "a private-use character", "Cn": "an unassigned code point",
         "Zl": "a line separator", "Zp": "a paragraph separator"}


def _name(c: str) -> str:
    return f"U+{ord(c):04X} {unicodedata.name(c, _KIND[unicodedata.category(c)])}"


def hidden(text: str | None) -> str | None:
    """Why ``text`` may not be stored to be shown to people, or None. A line break (LF,
    or CR LF as a browser's form sends it) and a tab are text; every other control, format
    or unassigned character is refused, named by its code point and position."""
    if not text:
        return None
    for i, c in enumerate(text):
        if c in "\n\t" or (c == "\r" and text[i + 1:i + 2] == "\n"):
            continue
        if unicodedata.category(c) in _UNSEEN:
            return (f"holds a character that does not show as itself ({_name(c)}, character "
                    f"{i + 1}): control and format characters (terminal escapes, direction "
                    "overrides, zero-width spaces) could make what a person is shown differ "
                    "from what it says; write plain text")
    return None


def _escape(c: str) -> str:
    """``c`` as a JSON-style escape (valid inside the CLI's JSON output too)."""
    code = ord(c)
    if code > 0xFFFF:  # a surrogate pair, as JSON writes one
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def visible(text: str, *, lines: bool = True) -> str:
    """``text`` with every character a terminal would not print as itself written as an
    escape (``\\u001b``); with ``lines`` a line break stays one, else it is escaped too
    (a one-line field never adds a line of its own)."""
    if text.isprintable() and (lines or "\n" not in text):
        return text
    return "".join(c if c.isprintable() or (lines and c == "\n") else _escape(c)
                   for c in text)
