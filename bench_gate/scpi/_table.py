"""A profile's header table: every spelling of every header (SCPI-99 Vol. 1 §6.2: short
and long forms, optional nodes; §6.2.1's rule-made short forms where the guide's casing
says another) -> its command; and the truncations between the two forms, which no
spelling takes but a lenient parser might.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ._patterns import Node, parse_pattern, spellings, truncations
from ._schema import CommandSpec, ProfileError, ProfileModel

__all__ = ["Entry", "Table", "between_map", "header_table", "spelled_between"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One spelling in the lookup table."""

    command: CommandSpec
    nodes: tuple[Node | None, ...]  # pattern node matched by each input mnemonic


Table = dict[tuple[bool, tuple[str, ...]], Entry]


def header_table(model: ProfileModel) -> Table:
    """The guide's spellings (two headers sharing one is a ProfileError), then SCPI-99's
    rule-made short forms wherever the guide's own spellings do not name another header."""
    table: Table = {}
    for command in model.commands:
        common = command.header.startswith("*")
        for words, matched in spellings(parse_pattern(command.header), rule=False):
            key = (common, words)
            if key in table and table[key].command is not command:
                raise ProfileError(
                    f"{model.name}: spelling {':'.join(words)!r} matches both "
                    f"{table[key].command.header!r} and {command.header!r}"
                )
            table[key] = Entry(command, matched)
    for command in model.commands:
        common = command.header.startswith("*")
        for words, matched in spellings(parse_pattern(command.header)):
            table.setdefault((common, words), Entry(command, matched))
    return table


def between_map(model: ProfileModel) -> dict[str, frozenset[str]]:
    """Each truncation between a node's short and long form -> the short forms of the
    nodes it truncates (``OUTPU`` -> OUTP)."""
    between: dict[str, set[str]] = {}
    for command in model.commands:
        for cut, short in truncations(parse_pattern(command.header)):
            between.setdefault(cut, set()).add(short)
    return {k: frozenset(v) for k, v in between.items()}


def spelled_between(table: Table, between: dict[str, frozenset[str]],
                    words: tuple[str, ...]) -> CommandSpec | None:
    """The known header ``words`` (no common command) names if each truncation is read as
    its node (``OUTPU CH1,ON``), or None."""
    options = [sorted({w} | between.get(w, frozenset())) for w in words]
    for combo in itertools.product(*options):
        if combo == words:  # as sent: no truncation (DATA is not DATA2, another header)
            continue
        entry = table.get((False, combo))
        if entry is not None:
            return entry.command
    return None
