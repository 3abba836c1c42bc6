"""Declarative instrument profiles: a command tree, parameter types, and each header's effect.

A profile is a YAML data file (``bench_gate/profiles/<name>.yaml``). Instrument knowledge
lives there, never in code branches on a model name. Loading compiles the header patterns
(``[SOURce:]VOLTage[:LEVel]``) into a lookup table of every legal spelling.
"""

from __future__ import annotations

import difflib
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
    "InstrumentKind",
    "ParamSpec",
    "Profile",
    "ProfileError",
    "SafeActionSpec",
    "TimingRole",
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
    #: A meter's range, resolution, NPLC, trigger and sample settings: passive, journaled.
    MEASURE_CONFIG = "measure-config"
    #: A meter function that drives current or voltage into the DUT (resistance,
    #: continuity, diode, capacitance, RTD and thermistor temperature): held.
    EXCITES = "excites"
    FORBIDDEN = "forbidden"
    UNKNOWN = "unknown"


class ProfileError(Exception):
    """A profile file is missing or does not describe a consistent command tree."""


ParamType = Literal["number", "integer", "boolean", "choice", "channel_name", "string", "block",
                    "minmax", "word"]
#: The settings that decide how long a reading takes (scpi._timing).
TimingRole = Literal["nplc", "aperture", "samples", "triggers", "trigger_delay",
                     "sample_interval"]
#: What kind of instrument a profile describes: the handoff's words follow it (a meter has
#: no outputs).
InstrumentKind = Literal["supply", "meter", "load", "smu", "other"]
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
    #: For ``choice``: the words, upper case for the short form (``IMMediate``). For
    #: ``string``: if given, the quoted header patterns it may name (``"VOLTage[:DC]"``).
    choices: tuple[str, ...] = ()
    #: For ``number`` and ``integer``: keywords passed to the instrument as they are
    #: (``MINimum``, ``MAXimum``, ``DEFault``, ``AUTO``, ``INFinity``), never resolved here.
    keywords: tuple[str, ...] = ()
    #: The instrument's value after ``*RST`` (for ``DEF`` in its simulator and the docs).
    default: Decimal | None = None
    #: For ``choice`` and ``string``: the values that drive current or voltage into the DUT,
    #: each with what the instrument applies; naming one makes the unit ``excites``.
    excites: dict[str, str] = Field(default_factory=dict)
    #: For ``excites``: the value the instrument assumes when the parameter is left out.
    assumed: str | None = None


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
    #: For ``effect: excites``: what the instrument applies to whatever is connected.
    applies: str = ""
    #: A setting that decides how long a reading takes (``VOLT:NPLC``: ``nplc``); the
    #: gateway keeps what it saw set, and a reading's timeout follows (scpi._timing).
    timing: TimingRole | None = None
    #: A query that takes a reading (``READ?``, ``MEAS?``, ``FETC?``): its timeout follows
    #: the timing settings.
    reads: bool = False
    #: Seconds this form may take on its own (``*TST?``), beyond the link's timeout.
    slow: Decimal | None = None


class CommandSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    header: str
    set: FormSpec | None = None
    query: FormSpec | None = None
    note: str = ""
    #: The numbers a '#' node takes when it names no channel (``DIGital:PIN#``: 1, 2, 3).
    suffixes: tuple[int, ...] = ()


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
    kind: InstrumentKind = "other"
    #: Every documented header is listed: a header the profile does not know is a typo,
    #: refused with -113 and a hint, never held (docs/profiles.md).
    complete: bool = False
    #: Where the command set was taken from (manual, revision): shown by ``profile check``.
    source: str = ""
    #: Free room for YAML anchors (parameter lists used by many headers); never read.
    shared: Any = None
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
    #: A number that is part of the mnemonic (``DATA2``): the only suffix it takes.
    fixed: int | None = None


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


@functools.lru_cache(maxsize=1024)
def _pattern_spellings(pattern: str) -> frozenset[tuple[str, ...]]:
    return frozenset(words for words, _ in _spellings(_parse_pattern(pattern)))


def canonical_header(command: CommandSpec) -> str:
    return _canonical_header(command.header)


@functools.lru_cache(maxsize=1024)
def _canonical_header(pattern: str) -> str:
    nodes = _parse_pattern(pattern)
    if pattern.startswith("*"):
        return "*" + nodes[0].short
    return ":".join(n.short + (str(n.fixed) if n.fixed is not None else "")
                    for n in nodes if not n.optional)


def canonical_with_suffix(command: CommandSpec, number: int) -> str:
    """The canonical header of a pattern whose '#' node keeps its number (``DNS2``)."""
    nodes = _parse_pattern(command.header)
    return ":".join(n.short + (str(number) if n.suffix and n.fixed is None else
                               str(n.fixed) if n.fixed is not None else "")
                    for n in nodes if not n.optional or (n.suffix and n.fixed is None))


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

    @property
    def complete(self) -> bool:
        return self.model.complete

    @property
    def kind(self) -> InstrumentKind:
        return self.model.kind

    def string_choice(self, spec: ParamSpec, text: str) -> str | None:
        """The canonical header a quoted choice names (``"volt:dc"`` -> ``VOLT``), or None."""
        words = tuple(w.upper() for w in text.strip().lstrip(":").split(":"))
        for pattern in spec.choices:
            if words in _pattern_spellings(pattern):
                return _canonical_header(pattern)
        return None

    def closest(self, common: bool, name: str, query: bool) -> str | None:
        """The known header nearest to the unknown ``name``, as the manual writes it."""
        candidates: dict[str, str] = {}
        for (is_common, words), entry in self.table.items():
            form = entry.command.query if query else entry.command.set
            if is_common == common and form is not None:
                candidates.setdefault(":".join(words), entry.command.header)
        wanted = name.lstrip("*").upper()
        found = difflib.get_close_matches(wanted, list(candidates), n=1, cutoff=0.7)
        if not found:
            return None
        return candidates[found[0]] + ("?" if query else "")

    def range_of(self, field_name: str, channel: int | None) -> tuple[Decimal, Decimal] | None:
        if channel is not None and channel in self.model.channels:
            return self.model.channels[channel].ranges.get(field_name)
        return None

    def field_query(self, field_name: str, channel: int | None) -> str:
        return self.model.fields[field_name].query.format(ch=channel)

    def lookup(self, common: bool, mnemonics: tuple[str, ...]) -> Entry | None:
        return self.table.get((common, mnemonics))

    def form_of(self, canonical: str) -> FormSpec | None:
        """The form a canonical unit was rendered from (``VOLT:NPLC 10.0`` -> its command
        form), or None for a unit the profile does not know."""
        head = canonical.split(" ", 1)[0]
        query = head.endswith("?")
        head = head.rstrip("?")
        common = head.startswith("*")
        words = tuple(w.rstrip("0123456789") for w in head.lstrip("*").split(":"))
        entry = self.lookup(common, words)
        if entry is None:
            return None
        return entry.command.query if query else entry.command.set

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
                _check_excitation(command, form)
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


def _check_excitation(command: CommandSpec, form: FormSpec) -> None:
    """An exciting form says what it applies; a parameter's exciting values are its own."""
    if form.effect is Effect.EXCITES and not form.applies:
        raise ProfileError(f"{command.header}: an excites form says what it applies "
                           "(applies: ...)")
    for p in form.params:
        if p.keywords and p.type not in ("number", "integer"):
            raise ProfileError(f"{command.header}: keywords are for number and integer "
                               f"parameters, not {p.type} {p.name!r}")
        if not p.excites:
            continue
        if p.type not in ("choice", "string") or not p.choices:
            raise ProfileError(f"{command.header}: excites values need a choice or string "
                               f"parameter with choices ({p.name!r})")
        if form.expand:
            raise ProfileError(f"{command.header}: an expansion cannot excite by value")
        shorts = {_canonical_header(c) if p.type == "string"
                  else "".join(ch for ch in c if ch.isupper()) for c in p.choices}
        unknown = sorted(set(p.excites) - shorts)
        if unknown:
            raise ProfileError(f"{command.header}: excites names {', '.join(unknown)}, not "
                               f"among the choices of {p.name!r} ({', '.join(sorted(shorts))})")


def _builtin_dir() -> Path:
    return Path(str(resources.files("bench_gate") / "profiles"))


def available_profiles() -> tuple[str, ...]:
    """Names of the profiles shipped with the package."""
    return tuple(sorted(p.stem for p in _builtin_dir().glob("*.yaml")))


#: Profiles loaded from a path, by their own name: a lab's profile is classified by name
#: (``classify(message, "my-psu")``) once its file has been loaded.
_BY_NAME: dict[str, Profile] = {}


def get_profile(name: str) -> Profile:
    """Load a profile by name (a shipped profile, or one already loaded from its file) or
    by path to a YAML file."""
    if name.endswith((".yaml", ".yml")):
        path = Path(name).resolve()
        profile = _load(path)
        known = _BY_NAME.get(profile.name)
        shipped = (_builtin_dir() / f"{profile.name}.yaml").resolve()
        if (known is not None and known is not profile) or (
                shipped.is_file() and shipped != path):
            raise ProfileError(f"profile {str(path)!r} is named {profile.name!r}, a name "
                               "already taken: give it a name of its own")
        _BY_NAME[profile.name] = profile
        return profile
    if name in _BY_NAME:
        return _BY_NAME[name]
    path = (_builtin_dir() / f"{name}.yaml").resolve()
    if not re.fullmatch(r"[a-z0-9_-]+", name) or not path.is_file():
        raise ProfileError(
            f"no profile named {name!r}; the shipped ones are {', '.join(available_profiles())}"
        )
    return _load(path)


@functools.cache
def _load(path: Path) -> Profile:
    if not path.is_file():
        raise ProfileError(f"no profile file {str(path)!r}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        model = ProfileModel.model_validate(raw)
    except (yaml.YAMLError, ValidationError) as exc:
        raise ProfileError(f"profile {str(path)!r} is invalid: {exc}") from exc
    return Profile.from_model(model)
