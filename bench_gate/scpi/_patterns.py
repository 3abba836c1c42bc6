"""Header patterns: ``[SOURce:]VOLTage[:LEVel]`` read into nodes, every legal spelling of
them (SCPI-99 Vol. 1 §6.2: short and long forms, optional nodes, numeric suffixes), and the
canonical header the gateway renders (short forms, optional nodes left out).
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass

from ._schema import CommandSpec, Effect, ProfileError, ProfileModel

__all__ = [
    "Node",
    "canonical_header",
    "canonical_with_suffix",
    "check_forbidden_under",
    "keyword_short",
    "parse_pattern",
    "pattern_canonical",
    "pattern_spellings",
    "spellings",
    "truncations",
    "under",
]


@dataclass(frozen=True, slots=True)
class Node:
    short: str
    long: str
    optional: bool
    suffix: bool  # takes a numeric suffix, '#' in the pattern
    #: A number that is part of the mnemonic (``DATA2``): the only suffix it takes.
    fixed: int | None = None
    #: The short forms SCPI-99's rule makes of ``long`` where the guide's casing says
    #: another (``TIMEr``: TIM, ``POWEr``: POW, ``TRACK``: TRAC). An instrument whose
    #: parser follows the rule takes them, so they are spellings of this node too.
    rules: tuple[str, ...] = ()


def keyword_short(word: str) -> str:
    """The short form of a keyword a parameter takes: its upper-case letters and the
    digits it ends with, a number that is part of the mnemonic as in a header node
    (``IMMediate``: IMM, ``PIN1``: PIN1, ``RCL0``: RCL0, ``D0``: D0, ``MOHM10``: MOHM10).
    Dropping them made PIN1, PIN2 and PIN3 one word, PIN, on the wire."""
    digits = word[len(word.rstrip("0123456789")):]
    return "".join(c for c in word[: len(word) - len(digits)] if c.isupper()) + digits


#: SCPI-99 Vol. 1 §6.2.1 (mnemonic generation): a keyword of more than four letters is
#: cut to four, or to three when the fourth is a vowel (some guides count Y).
VOWELS = frozenset("AEIOU")


def rule_shorts(long: str) -> frozenset[str]:
    """The short forms SCPI-99's rule gives a long form: ``TIMER`` -> TIM, ``TRACK`` ->
    TRAC, ``POLYNOMIAL`` -> POL (Y a vowel) or POLY (not)."""
    if len(long) <= 4:
        return frozenset({long})
    cut = {long[:3] if long[3] in VOWELS else long[:4]}
    if long[3] == "Y":
        cut.add(long[:3])
    return frozenset(cut)


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
        rules = tuple(sorted(rule_shorts(word.upper()) - {short, word.upper()}))
        nodes.append(Node(short, word.upper(), optional, suffix or bool(digits),
                          int(digits) if digits else None, rules))
    return tuple(nodes)


def spellings(nodes: tuple[Node, ...], rule: bool = True
              ) -> list[tuple[tuple[str, ...], tuple[Node, ...]]]:
    """Every way to send the nodes: each in its short or long form (and, with ``rule``,
    SCPI-99's short form where the guide's casing says another), optional ones left out
    or not."""
    choices: list[list[tuple[str, Node] | None]] = []
    for node in nodes:
        opts: list[tuple[str, Node] | None] = [(node.short, node)]
        if node.long != node.short:
            opts.append((node.long, node))
        if rule:
            opts.extend((r, node) for r in node.rules)
        if node.optional:
            opts.append(None)
        choices.append(opts)
    out = []
    for combo in itertools.product(*choices):
        present = [c for c in combo if c is not None]
        if present:
            out.append((tuple(w for w, _ in present), tuple(n for _, n in present)))
    return out


def truncations(nodes: tuple[Node, ...]) -> list[tuple[str, str]]:
    """Each truncation of a node's long form that is none of its spellings, longer than
    its shortest short form (``OUTPU`` of OUTPut), with the node's short form. SCPI-99
    takes none of them, but a lenient parser may read one as the node."""
    out: list[tuple[str, str]] = []
    for node in nodes:
        shortest = min(len(s) for s in (node.short, *node.rules))
        out.extend((node.long[:k], node.short) for k in range(shortest + 1, len(node.long))
                   if node.long[:k] not in (node.short, *node.rules))
    return out


@functools.lru_cache(maxsize=64)
def _prefixes(pattern: str) -> tuple[tuple[tuple[str, ...], tuple[Node, ...]], ...]:
    return tuple((words, nodes) for words, nodes in spellings(parse_pattern(pattern)))


def under(pattern: str, words: tuple[str, ...]) -> bool:
    """Whether the header ``words`` is ``pattern`` or a header below it, in any of its
    spellings, a truncation between a node's two forms included (``SYST:COMMU:LAN``): a
    lenient parser may read that as the node."""
    for spelled, nodes in _prefixes(pattern):
        if len(words) >= len(spelled) and all(
                w == s or (n.long.startswith(w) and len(w) > len(n.short))
                for w, s, n in zip(words, spelled, nodes, strict=False)):
            return True
    return False


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


def check_forbidden_under(model: ProfileModel) -> None:
    """Each subtree is a header pattern; a header listed under one forbids its command
    form, so that the file never says otherwise of what the gateway refuses."""
    for pattern in model.forbidden_under:
        if pattern.startswith("*"):
            raise ProfileError(f"{model.name}: forbidden_under {pattern!r}: a common "
                               "command has no subtree")
        parse_pattern(pattern)  # a ProfileError names a pattern it cannot read
    for command in model.commands:
        if command.set is None or command.set.effect is Effect.FORBIDDEN \
                or command.header.startswith("*"):
            continue
        for words, _ in spellings(parse_pattern(command.header), rule=False):
            inside = next((p for p in model.forbidden_under if under(p, words)), None)
            if inside is not None:
                raise ProfileError(f"{model.name}: {command.header} is under {inside} "
                                   "(forbidden_under): its command form is forbidden")
