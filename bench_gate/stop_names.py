"""A stop stays with its instrument, whatever it is named: its other names on this bench,
another bench's stop of it on the shared store, and bench.toml renaming it (interlocks.py);
and what a stopped instrument still takes."""

from __future__ import annotations

from typing import Any

from .core import Core
from .core import resource_key as _resource
from .scpi import Unit

__all__ = ["allowed", "follow_names", "same", "stop_of"]


def follow_names(core: Core, tables: tuple[str, ...]) -> None:
    """At start, before a stop is looked for or finished: a stop of this bench kept
    under a name bench.toml now gives another instrument (names swapped, an instrument
    renamed) moves to the name its instrument (its resource) has now. A stop stays
    with its instrument: the stopped one is refused under its new name, and the other
    one is neither stopped nor cleared, nor made safe, in its place. So does a stop of
    a bench no gateway serves now (the bench renamed) made on this host: listed and
    cleared here (one made on another host is another PC's instrument). Written before
    the old names are deleted: a crash between leaves more stopped, never less."""
    named = {_resource(inst.config.resource): name
             for name, inst in core.instruments.items()}
    ours: dict[str, bool] = {}
    for table in tables:
        moves = {}
        for key, record in core.store.kv_items(table):
            bench, _, name = key.rpartition("/")  # an instrument's name has no "/"
            here = core.instruments.get(name) if bench == core.config.bench else None
            if here is not None and _resource(here.config.resource) == record.get(
                    "resource"):
                continue  # its name is still its instrument's (another may be too)
            now = named.get(str(record.get("resource")))
            if now is None:
                continue
            if bench not in ours:
                ours[bench] = bench == core.config.bench or \
                    not core.registry.alive(bench)
            # Another bench's only if made on this host: a resource string names
            # another instrument on another PC (that bench is down, not renamed).
            if ours[bench] and (bench == core.config.bench
                                or record.get("host") == core.registry.host):
                moves[key] = (core.qualified(now), record)
        for new, record in moves.values():
            core.store.kv_put(table, new, record)
        for old in set(moves) - {new for new, _ in moves.values()}:
            core.store.kv_delete(table, old)


def same(core: Core, name: str) -> list[str]:
    """``name`` and the bench's other names for the same instrument: the same resource
    however spelled, or the same ``*IDN?`` answer (serial number included) once read.
    A stop of one is a stop of all: nothing energizes it under another name."""
    me = core.instruments.get(name)
    if me is None:
        return [name]
    return [name] + [n for n, inst in core.instruments.items() if n != name and (
        _resource(inst.config.resource) == _resource(me.config.resource)
        or (me.idn is not None and inst.idn == me.idn))]


def stop_of(core: Core, held: dict[str, dict[str, Any]], table: str, instrument: str
            ) -> tuple[str, dict[str, Any]] | None:
    """The stop in force on ``instrument`` under any of its names: this bench's, or
    another bench's on the shared store (the same resource, or the same ``*IDN?``)."""
    for name in same(core, instrument):
        key = core.qualified(name)
        stop = held.get(key) or core.store.kv_get(table, key)
        if stop is not None:
            return name, stop
    me = core.instruments.get(instrument)
    if me is None:
        return None
    for key, stop in core.store.kv_items(table):  # this bench's under an old name too
        if (stop.get("resource") == _resource(me.config.resource)
                and stop.get("host") in (None, core.registry.host)) \
                or (me.idn is not None and stop.get("idn") == me.idn):
            return key, stop
    return None


def allowed(unit: Unit) -> bool:
    """What a stopped instrument still takes: reads, selections, status commands, a meter's
    passive settings, and switching an output off. Nothing that can energize."""
    if unit.effect.value in ("read", "select", "harmless", "measure-config"):
        return True
    return unit.effect.value == "output" and unit.value is False
