"""Declarative instrument profiles: a command tree, parameter types, and each header's effect.

A profile is a YAML data file (``bench_gate/profiles/<name>.yaml``). Instrument knowledge
lives there, never in code branches on a model name. Loading compiles the header patterns
(``[SOURce:]VOLTage[:LEVel]``) into a lookup table of every legal spelling.
"""

from __future__ import annotations

import enum
import functools
import itertools
import re
from dataclasses import dataclass, field
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

__all__ = [
    "ChannelSpec",
    "CommandSpec",
    "Effect",
    "FieldSpec",
    "FormSpec",
    "ParamSpec",
    "Profile",
    "ProfileError",
    "SafeActionSpec",
    "available_profiles",
    "get_profile",
]


class Effect(enum.StrEnum):
    """What a unit does (see DESIGN.md)."""

    READ = "read"
    SELECT = "select"
    SETPOINT = "setpoint"
    OUTPUT = "output"
    PROTECTION = "protection"
    STATE = "state"
    HARMLESS = "harmless"
    FORBIDDEN = "forbidden"
    UNKNOWN = "unknown"


class ProfileError(Exception):
    """A profile file is missing or does not describe a consistent command tree."""


ParamType = Literal["number", "integer", "boolean", "choice", "channel_name", "string", "block",
                    "minmax"]
ChannelMode = Literal["none", "list", "param", "suffix", "all"]


class ParamSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    type: ParamType
    optional: bool = False
    #: For ``number``: the state field whose unit and per-channel range apply.
    field: str | None = None
    unit: str = ""
    range: tuple[Decimal, Decimal] | None = None
    choices: tuple[str, ...] = ()


class FormSpec(BaseModel):
    """The command form or the query form of one header."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    effect: Effect
    field: str | None = None
    params: tuple[ParamSpec, ...] = ()
    channel: ChannelMode = "none"
    #: For ``channel: param``: the name of the parameter that names the channel.
    channel_param: str | None = None
    canonical: str | None = None
    #: A form that does several things renders as several canonical units.
    expand: tuple[str, ...] = ()
    #: What happens to the field when the command runs, if not the parameter: e.g. cleared.
    sets: Any = None
    #: Let ';' appear inside this form's string and block data (IEEE 488.2 §7.7.5, §7.7.6):
    #: only for an instrument known to parse such data itself. Never for unknown headers.
    separators_in_data: bool = False
    #: Answered by the gateway itself, never sent to the instrument (``*CLS``: the error
    #: queue and status registers are shared by every client).
    local: bool = False


class CommandSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    header: str
    set: FormSpec | None = None
    query: FormSpec | None = None
    note: str = ""


class ChannelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    names: tuple[str, ...] = ()
    ranges: dict[str, tuple[Decimal, Decimal]] = Field(default_factory=dict)


class FieldSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    type: Literal["number", "boolean", "text"] = "number"
    unit: str = ""
    query: str
    default: Decimal | bool | str | None = None
    #: Measured fields are shown, never snapshotted for approval.
    measured: bool = False


class SafeActionSpec(BaseModel):
    """What makes one channel safe at once (output off), and which field says it is live."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The boolean field that is true while the channel drives the DUT (output, input).
    field: str
    #: The command that makes one channel safe; ``{ch}`` is the channel number.
    command: str


class ProfileModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    title: str
    identity: str = ""
    channels: dict[int, ChannelSpec] = Field(default_factory=dict)
    fields: dict[str, FieldSpec] = Field(default_factory=dict)
    select_query: str | None = None
    #: The safe action (DESIGN.md): applied at once when a channel leaves the envelope.
    safe_action: SafeActionSpec | None = None
    commands: tuple[CommandSpec, ...]

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z0-9_-]+", v):
            raise ValueError("profile names are lower-case letters, digits, '-' and '_'")
        return v


@dataclass(frozen=True, slots=True)
class Node:
    short: str
    long: str
    optional: bool
    suffix: bool  # takes a numeric suffix, '#' in the pattern


@dataclass(frozen=True, slots=True)
class Entry:
    """One spelling in the lookup table."""

    command: CommandSpec
    nodes: tuple[Node | None, ...]  # pattern node matched by each input mnemonic


RE_NODE = re.compile(r"^(\[)?:?([A-Za-z*][A-Za-z]*)(#)?(\])?$")


@functools.lru_cache(maxsize=1024)
def _parse_pattern(pattern: str) -> tuple[Node, ...]:
    """``[SOURce:]VOLTage[:LEVel]`` -> nodes; upper-case letters are the short form."""
    if pattern.startswith("*"):
        word = pattern[1:]
        return (Node(word.upper(), word.upper(), False, False),)
    parts = re.findall(r"\[:?[A-Za-z]+#?:?\]|:?[A-Za-z]+#?", pattern)
    if "".join(parts).replace(":", "") != pattern.replace(":", ""):
        raise ProfileError(f"cannot read header pattern {pattern!r}")
    nodes = []
    for part in parts:
        optional = part.startswith("[")
        word = part.strip("[]:")
        suffix = word.endswith("#")
        word = word.rstrip("#")
        short = "".join(c for c in word if c.isupper())
        if not short or not word[: len(short)].isupper():
            raise ProfileError(f"node {word!r} in {pattern!r} has no upper-case short form")
        nodes.append(Node(short, word.upper(), optional, suffix))
    return tuple(nodes)


def _spellings(nodes: tuple[Node, ...]) -> list[tuple[tuple[str, ...], tuple[Node, ...]]]:
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


def canonical_header(command: CommandSpec) -> str:
    return _canonical_header(command.header)


@functools.lru_cache(maxsize=1024)
def _canonical_header(pattern: str) -> str:
    nodes = _parse_pattern(pattern)
    if pattern.startswith("*"):
        return "*" + nodes[0].short
    return ":".join(n.short for n in nodes if not n.optional)


@dataclass(frozen=True)
class Profile:
    """A loaded profile with its compiled header table."""

    model: ProfileModel
    table: dict[tuple[bool, tuple[str, ...]], Entry] = field(repr=False)
    channel_names: dict[str, int] = field(repr=False)

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def channels(self) -> tuple[int, ...]:
        return tuple(sorted(self.model.channels))

    @property
    def fields(self) -> dict[str, FieldSpec]:
        return self.model.fields

    @property
    def safe_action(self) -> SafeActionSpec | None:
        return self.model.safe_action

    def range_of(self, field_name: str, channel: int | None) -> tuple[Decimal, Decimal] | None:
        if channel is not None and channel in self.model.channels:
            return self.model.channels[channel].ranges.get(field_name)
        return None

    def field_query(self, field_name: str, channel: int | None) -> str:
        return self.model.fields[field_name].query.format(ch=channel)

    def lookup(self, common: bool, mnemonics: tuple[str, ...]) -> Entry | None:
        return self.table.get((common, mnemonics))

    @classmethod
    def from_model(cls, model: ProfileModel) -> Profile:
        table: dict[tuple[bool, tuple[str, ...]], Entry] = {}
        for command in model.commands:
            common = command.header.startswith("*")
            nodes = _parse_pattern(command.header)
            for words, matched in _spellings(nodes):
                key = (common, words)
                if key in table and table[key].command is not command:
                    raise ProfileError(
                        f"{model.name}: spelling {':'.join(words)!r} matches both "
                        f"{table[key].command.header!r} and {command.header!r}"
                    )
                table[key] = Entry(command, matched)
            for form in (command.set, command.query):
                if form is None:
                    continue
                for p in form.params:
                    if p.type == "number" and p.field is None and p.range is None:
                        raise ProfileError(f"{command.header}: number {p.name!r} needs a field")
                    if p.field is not None and p.field not in model.fields:
                        raise ProfileError(f"{command.header}: unknown field {p.field!r}")
                if form.field is not None and form.field not in model.fields:
                    raise ProfileError(f"{command.header}: unknown field {form.field!r}")
                if form.separators_in_data and not any(
                        p.type in ("string", "block") for p in form.params):
                    raise ProfileError(f"{command.header}: separators_in_data needs a string "
                                       "or block parameter")
                if form.local and (form is command.query or form.effect is not Effect.HARMLESS
                                   or form.expand):
                    raise ProfileError(f"{command.header}: only a harmless command form, not "
                                       "a query or an expansion, can be local")
        safe = model.safe_action
        if safe is not None and (safe.field not in model.fields
                                 or model.fields[safe.field].type != "boolean"):
            raise ProfileError(f"{model.name}: safe_action.field {safe.field!r} must name a "
                               "boolean field")
        names: dict[str, int] = {}
        for number, spec in model.channels.items():
            for alias in spec.names:
                names[alias.upper()] = number
        return cls(model, table, names)


def _builtin_dir() -> Path:
    return Path(str(resources.files("bench_gate") / "profiles"))


def available_profiles() -> tuple[str, ...]:
    """Names of the profiles shipped with the package."""
    return tuple(sorted(p.stem for p in _builtin_dir().glob("*.yaml")))


@functools.cache
def get_profile(name: str) -> Profile:
    """Load a profile by name (a shipped profile) or by path to a YAML file."""
    path = Path(name) if name.endswith((".yaml", ".yml")) else _builtin_dir() / f"{name}.yaml"
    if not path.is_file():
        raise ProfileError(
            f"no profile named {name!r}; the shipped ones are {', '.join(available_profiles())}"
        )
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        model = ProfileModel.model_validate(raw)
    except (yaml.YAMLError, ValidationError) as exc:
        raise ProfileError(f"profile {str(path)!r} is invalid: {exc}") from exc
    return Profile.from_model(model)
