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

__all__ = ["Clashes", "Entry", "Table", "between_map", "header_table", "spelled_between"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One spelling in the lookup table."""

    command: CommandSpec
    nodes: tuple[Node | None, ...]  # pattern node matched by each input mnemonic


Table = dict[tuple[bool, tuple[str, ...]], Entry]
#: A spelling SCPI-99's rule makes of two headers at once -> their headers, as written.
Clashes = dict[tuple[bool, tuple[str, ...]], tuple[str, ...]]


def header_table(model: ProfileModel) -> tuple[Table, Clashes]:
    """The guide's spellings (two headers sharing one is a ProfileError), then SCPI-99's
    rule-made short forms wherever the guide's own spellings do not name another header.
    A rule-made spelling of two headers (``TIM`` of TIMEr and of TIMIng) is neither's: it
    goes to the clashes, refused whichever header the file happens to list first."""
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
    ruled: Table = {}
    clashes: dict[tuple[bool, tuple[str, ...]], list[str]] = {}
    for command in model.commands:
        common = command.header.startswith("*")
        for words, matched in spellings(parse_pattern(command.header)):
            key = (common, words)
            prior = ruled.setdefault(key, Entry(command, matched))
            if key not in table and prior.command is not command:
                named = clashes.setdefault(key, [prior.command.header])
                if command.header not in named:
                    named.append(command.header)
    table.update((k, e) for k, e in ruled.items() if k not in table and k not in clashes)
    return table, {k: tuple(v) for k, v in clashes.items()}


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
