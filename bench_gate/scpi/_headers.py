"""Resolving a unit's header against a profile's command tree: relative headers after ';'
(SCPI-99 Vol. 1 §6.2.4), numeric suffixes (§6.2.5) and the forms a header has, with -113
and the closest header for a typo on a complete profile.
"""

from __future__ import annotations

from ._errors import ScpiError, ScpiSyntaxError
from ._lexer import RawUnit
from ._params import ParamReader
from ._patterns import canonical_with_suffix
from ._profile import Profile
from ._schema import CommandSpec, Effect, FormSpec
from .units import Unit, render_data

__all__ = ["HeaderResolver"]


def _split_suffix(mnemonic: str) -> tuple[str, int | None]:
    stem = mnemonic.rstrip("0123456789")
    return stem, (int(mnemonic[len(stem) :]) if len(stem) < len(mnemonic) else None)


class HeaderResolver(ParamReader):
    """Resolves the headers of one message against one profile; holds the header path."""

    def __init__(self, message: str, profile: Profile) -> None:
        super().__init__(message, profile)
        #: The header path for a relative header (SCPI-99 Vol. 1 §6.2.4): each node with the
        #: numeric suffix it was sent with, so ``SOUR2:VOLT 5;CURR 1`` means ``SOUR2:CURR``.
        self.path: tuple[tuple[str, int | None], ...] = ()
        #: The canonical header of the unit being resolved when a '#' keeps its number.
        self.numbered: str | None = None
        #: The mnemonics of the last header resolved, suffixes off, its path included.
        self.words: tuple[str, ...] = ()

    def resolve(self, raw: RawUnit) -> str | tuple[CommandSpec, FormSpec, int | None]:
        """The unit's command, form and suffix channel; or the name of an unknown header."""
        if raw.common:
            words: tuple[str, ...] = raw.mnemonics
            suffixes: tuple[int | None, ...] = (None,)
            if _split_suffix(raw.mnemonics[0])[1] is not None:
                return "*" + raw.mnemonics[0]
        else:
            # SCPI-99 Vol. 1 §6.2.4: after ';' a header without ':' is relative to the
            # previous header's path, the nodes as sent, numeric suffixes included (the
            # path is "the characters up to and including the last colon"); common
            # commands leave the path alone.
            split = (() if raw.absolute else self.path) + tuple(
                _split_suffix(m) for m in raw.mnemonics)
            words = tuple(s for s, _ in split)
            suffixes = tuple(n for _, n in split)
            self.path = split[:-1]
        self.words = () if raw.common else words
        entry = self.profile.lookup(raw.common, words)
        if entry is not None and any(
                node is not None and node.fixed is not None and number != node.fixed
                for node, number in zip(entry.nodes, suffixes, strict=True)):
            entry = None  # DATA is not DATA2: another header, one the profile does not know
        if entry is None:
            name = ("*" if raw.common else "") + ":".join(
                w + (str(n) if n is not None else "") for w, n in zip(words, suffixes, strict=True)
            )
            both = self.profile.clashes.get((raw.common, words))
            if both is not None:  # an instrument built to the rule could run either
                raise self.err(ScpiSyntaxError, -113, f"{name} is SCPI-99's short form of "
                               f"both {' and '.join(both)} (Vol. 1 §6.2.1): send the "
                               "guide's spelling of the one meant", raw.start)
            near = None if raw.common else self.profile.spelled_between(words)
            if near is not None:  # held as unknown, a lenient parser could run it unjudged
                raise self.err(ScpiSyntaxError, -113, f"{name} is no spelling of "
                               f"{near.header}: SCPI-99 takes each mnemonic's short form or "
                               "its long form, nothing between", raw.start)
            return name
        suffix_channel: int | None = None
        for node, number in zip(entry.nodes, suffixes, strict=True):
            if node is not None and node.fixed is not None:
                continue
            if number is None or node is None:
                continue
            if not node.suffix:
                raise self.err(
                    ScpiSyntaxError, -114, f"{node.short} takes no numeric suffix", raw.start
                )
            suffix_channel = number
        command = entry.command
        form = command.query if raw.query else command.set
        if form is None:
            detail = "is a query only" if not raw.query else "has no query form"
            raise self.err(ScpiSyntaxError, -113, f"{command.header} {detail}", raw.start)
        if form.channel != "suffix" and suffix_channel is not None:
            if command.suffixes and suffix_channel not in command.suffixes:
                raise self.err(ScpiSyntaxError, -114, f"{command.header} takes the suffixes "
                               f"{', '.join(map(str, command.suffixes))}, not {suffix_channel}",
                               raw.start)
            self.numbered = canonical_with_suffix(command, suffix_channel)
        return command, form, suffix_channel

    def undefined(self, raw: RawUnit, name: str) -> ScpiError:
        """A header a complete profile does not know is a typo: -113 with the closest one."""
        text = name + ("?" if raw.query else "")
        hint = self.profile.closest(raw.common, name, raw.query)
        where = f"; closest: {hint}" if hint else ""
        return self.err(ScpiSyntaxError, -113, f"{text} is not a command of the "
                        f"{self.profile.model.title}{where}", raw.start)

    def unknown(self, raw: RawUnit, name: str) -> Unit:
        text = name + ("?" if raw.query else "")
        if raw.params:
            text += " " + ",".join(render_data(p) for p in raw.params)
        return Unit(raw.index, raw.start, raw.text, name + ("?" if raw.query else ""),
                    raw.query, Effect.UNKNOWN, None, None, None, text)
