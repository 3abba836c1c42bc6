"""A stop a crash cut off, found at start (interlocks.py), and what the journal already says
of one: a crash between a stop's or a clear's journal event and the store writes after it
leaves the store behind the journal. The restart does what the journal says was done, never
it again: a stop journaled as done is not re-run (a second ``emergency_stop``), and a clear
journaled is finished (never a stop gone from the store with no ``stop_cleared``, nor one
journaled as cleared and still in force)."""

from __future__ import annotations

from typing import Any

from .core import Core
from .models import EventType

__all__ = ["cut_off"]

#: How far back the bench's journal is read: the crash came right after the event, and the
#: restart reads it before anything else is journaled on the bench.
LOOK_BACK = 200


def _mine(core: Core, table: str) -> dict[str, dict[str, Any]]:
    """This bench's records in ``table``, by instrument name."""
    out = {}
    for key, record in core.store.kv_items(table):
        bench, _, name = key.rpartition("/")  # a bench's name may hold "/"
        if bench == core.config.bench:
            out[name] = record
    return out


def _settle(core: Core, stops: str, stopping: str) -> None:
    """At start, before a cut-off stop is finished: the stops a ``stop_cleared`` event
    already ends (it names each one's ``at``) go from both tables; a stop journaled as done
    (an ``emergency_stop`` of its ``by`` and ``at``, with nothing the store refused) loses
    only its unfinished record."""
    events = core.store.recent(f"bench:{core.config.bench}", limit=LOOK_BACK)
    ended: dict[str, set[str]] = {}
    done: set[tuple[str, str, str]] = set()
    for event in events:
        data = event.data
        if event.type is EventType.STOP_CLEARED:
            for name, at in (data.get("stops") or {}).items():
                ended.setdefault(name, set()).add(str(at))
        elif event.type is EventType.EMERGENCY_STOP and "store_error" not in data:
            done |= {(str(data.get("by")), str(data.get("at")), name)
                     for name in data.get("instruments") or {}}
    for name, record in _mine(core, stops).items():
        if record.get("at") and str(record["at"]) in ended.get(name, ()):
            for table in (stopping, stops):
                core.store.kv_delete(table, core.qualified(name))
    for name, record in _mine(core, stopping).items():
        if (str(record.get("by")), str(record.get("at")), name) in done:
            core.store.kv_delete(stopping, core.qualified(name))


def cut_off(core: Core, stops: str, stopping: str) -> dict[tuple[str, str, str], list[str]]:
    """At start: this bench's stops a crash cut off before their journal event, grouped by
    who pressed them, through what and when (each pressing runs again); the journal read
    first (``_settle``). A record of an instrument no longer on the bench goes."""
    _settle(core, stops, stopping)
    cut: dict[tuple[str, str, str], list[str]] = {}
    for key, record in core.store.kv_items(stopping):
        bench, _, name = key.rpartition("/")  # a bench's name may hold "/"
        if bench != core.config.bench:
            continue
        if name not in core.instruments:  # no longer on this bench
            core.store.kv_delete(stopping, key)
            continue
        group = (str(record.get("by", "")), str(record.get("door", "")),
                 str(record.get("at", "")))
        cut.setdefault(group, []).append(name)
    return cut
