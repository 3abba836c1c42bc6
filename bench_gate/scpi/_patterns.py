"""Header patterns: ``[SOURce:]VOLTage[:LEVel]`` read into nodes, every legal spelling of
them (SCPI-99 Vol. 1 §6.2: short and long forms, optional nodes, numeric suffixes), and the
canonical header the gateway renders (short forms, optional nodes left out).
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass

from ._schema import CommandSpec, ProfileError

__all__ = [
    "Node",
    "canonical_header",
    "canonical_with_suffix",
    "parse_pattern",
    "pattern_canonical",
    "pattern_spellings",
    "spellings",
]


@dataclass(frozen=True, slots=True)
class Node:
    short: str
    long: str
    optional: bool
    suffix: bool  # takes a numeric suffix, '#' in the pattern
    #: A number that is part of the mnemonic (``DATA2``): the only suffix it takes.
    fixed: int | None = None



@functools.lru_cache(maxsize=1024)
def parse_pattern(pattern: str) -> tuple[Node, ...]:
    """``[SOURce:]VOLTage[:LEVel]`` -> nodes; upper-case letters are the short form."""
    if pattern.startswith("*"):
        word = pattern[1:]
        return (Node(word.upper(), word.upper(), False, False),)
    parts = re.findall(r"\[:?[A-Za-z]+\d*#?:?\]|:?[A-Za-z]+\d*#?", pattern)
    if "".join(parts).replace(":", "") != pattern.replace(":", ""):
        raise ProfileError(f"cannot read header pattern {pattern!r}")
    nodes = []
    for part in parts:
        optional = part.startswith("[")
        word = part.strip("[]:")
        suffix = word.endswith("#")
        word = word.rstrip("#")
        digits = word[len(word.rstrip("0123456789")):]
        word = word[: len(word) - len(digits)]
        if digits and suffix:
            raise ProfileError(f"node {word}{digits}# in {pattern!r}: a fixed number or '#'")
        short = "".join(c for c in word if c.isupper())
        if not short or not word[: len(short)].isupper():
            raise ProfileError(f"node {word!r} in {pattern!r} has no upper-case short form")
        nodes.append(Node(short, word.upper(), optional, suffix or bool(digits),
                          int(digits) if digits else None))
    return tuple(nodes)


def spellings(nodes: tuple[Node, ...]) -> list[tuple[tuple[str, ...], tuple[Node, ...]]]:
    choices: list[list[tuple[str, Node] | None]] = []
    for node in nodes:
        opts: list[tuple[str, Node] | None] = [(node.short, node)]
        if node.long != node.short:
            opts.append((node.long, node))
        if node.optional:
            opts.append(None)
        choices.append(opts)
    out = []
    for combo in itertools.product(*choices):
        present = [c for c in combo if c is not None]
        if present:
            out.append((tuple(w for w, _ in present), tuple(n for _, n in present)))
    return out


@functools.lru_cache(maxsize=1024)
def pattern_spellings(pattern: str) -> frozenset[tuple[str, ...]]:
    return frozenset(words for words, _ in spellings(parse_pattern(pattern)))


def canonical_header(command: CommandSpec) -> str:
    return pattern_canonical(command.header)


@functools.lru_cache(maxsize=1024)
def pattern_canonical(pattern: str) -> str:
    nodes = parse_pattern(pattern)
    if pattern.startswith("*"):
        return "*" + nodes[0].short
    return ":".join(n.short + (str(n.fixed) if n.fixed is not None else "")
                    for n in nodes if not n.optional)


def canonical_with_suffix(command: CommandSpec, number: int) -> str:
    """The canonical header of a pattern whose '#' node keeps its number (``DNS2``)."""
    nodes = parse_pattern(command.header)
    return ":".join(n.short + (str(number) if n.suffix and n.fixed is None else
                               str(n.fixed) if n.fixed is not None else "")
                    for n in nodes if not n.optional or (n.suffix and n.fixed is None))
