"""Concrete messages for the headers of a profile: one or more per query form, with every
channel and every optional MIN/MAX/DEF spelled out.

``bench-gate profile test`` sends them to an instrument (or its simulator) and reports those
that go unanswered; CI does the same for every shipped profile against its simulator.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._patterns import keyword_short
from ._profile import Profile
from ._schema import CommandSpec, Effect, FormSpec, ParamSpec
from .units import format_number

__all__ = ["PASSING", "Example", "command_examples", "query_examples", "sample_value"]

#: Effects that run without a person: a query of one of these must always be answered.
PASSING = frozenset({Effect.READ, Effect.SELECT, Effect.HARMLESS, Effect.MEASURE_CONFIG})
#: A string parameter's sample (a file name is the commonest string a query takes).
SAMPLE_STRING = '"sample.sta"'


@dataclass(frozen=True, slots=True)
class Example:
    """One message that exercises one form of one header."""

    message: str
    header: str  # the profile's header pattern
    query: bool
    effect: Effect


def sample_value(spec: ParamSpec, profile: Profile) -> str:
    """A legal value for a parameter, as a client would send it."""
    if spec.type in ("number", "integer"):
        if spec.range is not None:
            low = spec.range[0]
            return format_number(low) if spec.type == "number" else str(int(low))
        if spec.keywords:
            return keyword_short(spec.keywords[0])
        channel = profile.channels[0] if profile.channels else None
        found = profile.range_of(spec.field, channel) if spec.field else None
        return format_number(found[0]) if found else "0"
    if spec.type == "boolean":
        return "0"
    if spec.type in ("choice", "minmax"):
        choices = spec.choices or ("MINimum",)
        return keyword_short(choices[0]) or choices[0]
    if spec.type == "channel_name":
        return next(iter(profile.channel_names))
    if spec.type == "string":
        return f'"{_strip_optional(spec.choices[0])}"' if spec.choices else SAMPLE_STRING
    if spec.type == "block":
        return "#13abc"
    if spec.type == "channels":
        return "NONE"
    return "DEF"


def _limits(spec: ParamSpec) -> list[str]:
    """Every value of an optional MIN|MAX|DEF query parameter."""
    if spec.type == "minmax":
        return ["MIN", "MAX"]
    if spec.type == "choice" and {c.upper() for c in spec.choices} <= {
            "MINIMUM", "MAXIMUM", "DEFAULT"}:
        return [keyword_short(choice) for choice in spec.choices]
    return []


def _spelled(command: CommandSpec, form: FormSpec, profile: Profile) -> list[str]:
    """The header as sent, once per channel a suffix names."""
    words = []
    for part in command.header.replace("[", "").replace("]", "").split(":"):
        if part.endswith("#"):
            part = part[:-1] + "{n}"
        words.append(part)
    text = ":".join(w for w in words if w)
    if "{n}" not in text:
        return [text]
    numbers = command.suffixes or (profile.channels if form.channel == "suffix" else (1,))
    return [text.replace("{n}", str(n)) for n in numbers]


def _strip_optional(pattern: str) -> str:
    """``[SOURce:]VOLTage[:LEVel]`` -> ``VOLTage``: the shortest spelling's long form."""
    out, depth = [], 0
    for ch in pattern:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out).strip(":")


def _headers(command: CommandSpec, form: FormSpec, profile: Profile) -> list[str]:
    if "#" not in command.header:
        return [_strip_optional(command.header)]
    return _spelled(command, form, profile)


def query_examples(profile: Profile, effects: frozenset[Effect] = PASSING) -> list[Example]:
    """Messages for every query form whose effect is in ``effects`` (default: the ones that
    pass without a person, which must therefore always be answered)."""
    return _examples(profile, effects, query=True)


def command_examples(profile: Profile, effects: frozenset[Effect] = frozenset(Effect)
                     ) -> list[Example]:
    """Messages for every command form (no '?') whose effect is in ``effects``."""
    return _examples(profile, effects, query=False)


def _examples(profile: Profile, effects: frozenset[Effect], *, query: bool) -> list[Example]:
    out: list[Example] = []
    for command in profile.model.commands:
        form = command.query if query else command.set
        if form is None or form.effect not in effects:
            continue
        for header in _headers(command, form, profile):
            out.extend(_instances(command, form, profile, header, query))
    return out


def _instances(command: CommandSpec, form: FormSpec, profile: Profile,
               header: str, query: bool = True) -> list[Example]:
    required = [sample_value(p, profile) for p in form.params
                if not p.optional and p.name != form.channel_param]
    extras: list[list[str]] = [[]]
    for spec in form.params:
        if spec.optional and spec.name != form.channel_param:
            extras += [[value] for value in _limits(spec)]
            break
    where: list[str | None] = [None]
    if form.channel == "list" and profile.channels:
        where = [f"(@{ch})" for ch in profile.channels]
    elif form.channel == "param":
        spec = next(p for p in form.params if p.name == form.channel_param)
        names = [next(a for a, n in profile.channel_names.items() if n == ch)
                 if spec.type == "channel_name" else str(ch) for ch in profile.channels]
        where = [*names, *([None] if spec.optional else [])]
    out = []
    if not query:
        extras = [[]]
    for channel in where:
        for extra in extras:
            if form.channel == "param" and query:
                params = [channel] if channel is not None else []
            elif form.channel == "param":
                others = [sample_value(p, profile) for p in form.params
                          if p.name != form.channel_param]
                params = [channel, *others] if channel is not None else others
            else:
                params = [*required, *extra, *([channel] if channel is not None else [])]
            text = header + ("?" if query else "") + (" " + ",".join(params) if params else "")
            select = profile.addressing.select if profile.addressing else None
            if profile.addressing is not None and form.channel == "list" and channel:
                # As the instrument's own clients write it: select, then the bare unit.
                text = text[: -len(channel)].rstrip(" ,")
                if select is not None:
                    # A common command header takes no leading colon (IEEE 488.2).
                    text = (select.format(ch=channel[2:-1])
                            + (";" if text.startswith("*") else ";:") + text)
            out.append(Example(text, command.header, query, form.effect))
    return out
