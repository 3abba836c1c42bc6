"""The one JSON vocabulary every door speaks: camelCase keys, RFC 3339 times in UTC with
``Z``.

The core keeps its records (a handoff, a receipt, a journal event's data) in Python's
snake_case; a door turns them into wire JSON here, once, on the way out. Keys that are data
rather than names (``ch1.voltage``, an instrument's name, an edit's target) are kept as
they are: they are what a person types back (``--set CH1.voltage=5``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from pydantic.alias_generators import to_camel

__all__ = ["DATA_MAPS", "camel", "rfc3339", "utc_words", "wire"]

#: Maps whose keys are data (snapshot keys, instrument names, edit targets), by the name
#: of the key that holds them, in either spelling.
DATA_MAPS = frozenset({
    "snapshot", "proposed", "diff", "stale_diff", "before", "after", "read_back",
    "edits", "instruments", "values", "fields", "channels", "limits",
})
#: Data maps whose values are data maps too (channel -> field -> value).
_DEEP = frozenset({"channels", "limits"})
_DATA = DATA_MAPS | {camel for camel in (to_camel(k) for k in DATA_MAPS)}
_NAME = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")
#: An ISO 8601 time with a UTC offset of zero, as ``datetime.isoformat()`` writes it.
_UTC_TEXT = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)\+00:00")


def camel(key: str) -> str:
    """``margin_pct`` -> ``marginPct``; anything that is not a snake_case name is kept."""
    return to_camel(key) if _NAME.fullmatch(key) else key


def rfc3339(at: datetime) -> str:
    """RFC 3339 in UTC with ``Z`` (a naive time is taken as UTC)."""
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    return at.isoformat().replace("+00:00", "Z")


def utc_words(text: str) -> str:
    """A sentence for people (an outcome) with each UTC time in it written with ``Z``."""
    return _UTC_TEXT.sub(r"\1Z", text) if "+00:00" in text else text


def wire(value: Any, *, data: bool = False, deep: bool = False) -> Any:
    """``value`` as wire JSON: camelCase keys (not inside a data map), ``Z`` times."""
    if isinstance(value, dict):
        if data:
            return {str(k): wire(v, data=deep) for k, v in value.items()}
        return {camel(str(k)): wire(v, data=str(k) in _DATA, deep=str(k) in _DEEP)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [wire(v) for v in value]
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, str):
        return utc_words(value)
    return value
