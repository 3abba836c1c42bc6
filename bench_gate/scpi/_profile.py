"""Profiles as the gateway uses them: a profile file loaded, checked for consistency, and
compiled into a lookup table of every legal spelling of every header.

Instrument knowledge lives in the profile files (``bench_gate/profiles/<name>.yaml``),
never in code branches on a model name. What a file may say is ``_schema.py``; how a header
pattern is spelled is ``_patterns.py``. To teach the loader a new section: add its model to
``_schema.py`` and, if it must agree with the rest of the file, a check to
:func:`check_model` (``_model_check.py``).
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass, field
from decimal import Decimal
from importlib import resources
from pathlib import Path

import yaml
from pydantic import ValidationError

from ._errors import ScpiError
from ._excitation import check_excitation
from ._lexer import LONG_KEYWORDS, MAX_MNEMONIC, ChannelList, lex
from ._lock import check_lock
from ._model_check import check_model
from ._patterns import (
    parse_pattern,
    pattern_canonical,
    pattern_spellings,
    under,
)
from ._schema import (
    AddressingSpec,
    CommandSpec,
    FieldSpec,
    FormSpec,
    InstrumentKind,
    MeterSafeSpec,
    ParamSpec,
    ProfileError,
    ProfileModel,
    SafeActionSpec,
)
from ._table import Clashes, Entry, Table, between_map, header_table, spelled_between

__all__ = [
    "Entry",
    "Profile",
    "available_profiles",
    "check_model",
    "get_profile",
]



#: Headers whose form a profile keeps (``Profile.forms``).
FORMS_KEPT = 4096
#: A register word in hex, as the SPD3303X/XE Programming Guide's SYSTem:STATus? writes it
#: ("the return info is hexadecimal format", e.g. 0x0224), with or without the 0x; and in
#: decimal (<NR1>, IEEE 488.2 8.7.2). No sign, no "_": int() would take both.
RE_HEX_WORD = re.compile(r"(?:0[xX])?[0-9A-Fa-f]{1,8}")
RE_DECIMAL_WORD = re.compile(r"[0-9]{1,10}")


@dataclass(frozen=True)
class Profile:
    """A loaded profile with its compiled header table."""

    model: ProfileModel
    table: Table = field(repr=False)
    channel_names: dict[str, int] = field(repr=False)
    #: ``form_of`` by a unit's header (what it depends on), asked twice a read.
    forms: dict[str, FormSpec | None] = field(default_factory=dict, repr=False,
                                              compare=False)
    #: A truncation between a node's short and long form (``OUTPU``) -> the short forms
    #: of the nodes it truncates (:meth:`spelled_between`).
    between: dict[str, frozenset[str]] = field(default_factory=dict, repr=False,
                                               compare=False)
    #: A rule-made spelling of two headers -> both (``_table.header_table``): refused.
    clashes: Clashes = field(default_factory=dict, repr=False, compare=False)
    #: An answer already made canonical, by (field, answer, channel): a recheck and a
    #: read-back ask the same fields again and again (bench_gate/snapshots.normalize).
    answers: dict[tuple[str, str, int | None], str] = field(default_factory=dict, repr=False,
                                                             compare=False)

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
        """The safe action of an instrument with outputs (output off, per channel)."""
        safe = self.model.safe_action
        return safe if isinstance(safe, SafeActionSpec) else None

    @property
    def meter_safe(self) -> MeterSafeSpec | None:
        """A meter's safe action: a passive function, shown by its excitation query."""
        safe = self.model.safe_action
        return safe if isinstance(safe, MeterSafeSpec) else None

    @property
    def complete(self) -> bool:
        return self.model.complete

    @property
    def kind(self) -> InstrumentKind:
        return self.model.kind

    @property
    def addressing(self) -> AddressingSpec | None:
        return self.model.addressing

    def wire(self, canonical: str) -> tuple[str, ...] | None:
        """What reaches the instrument for one canonical text the gateway rendered: the
        text itself; or, on a profile with ``addressing``, for a ``channel: list`` form
        whose last datum names one channel, the select command and the text without its
        list (one lane turn). None: a list it cannot be sent, a parameter's data included."""
        spec = self.model.addressing
        if spec is None or "(@" not in canonical:
            return (canonical,)
        try:
            units = lex(canonical)
        except ScpiError:
            return None
        listed = units[0].params[-1] if len(units) == 1 and units[0].params else None
        if not isinstance(listed, ChannelList):
            return (canonical,)  # the list is inside string or block data
        form = self.form_of(canonical)
        if len(listed.channels) != 1 or form is None or form.channel != "list":
            return None
        bare = canonical[: listed.pos].rstrip().rstrip(",").rstrip()
        if spec.select is None:  # the instrument's one channel
            return (bare,)
        return (spec.select.format(ch=listed.channels[0]), bare)

    def string_choice(self, spec: ParamSpec, text: str) -> str | None:
        """The canonical header a quoted choice names (``"volt:dc"`` -> ``VOLT``), or None."""
        words = tuple(w.upper() for w in text.strip().lstrip(":").split(":"))
        for pattern in spec.choices:
            if words in pattern_spellings(pattern):
                return pattern_canonical(pattern)
        return None

    def spelled_between(self, words: tuple[str, ...]) -> CommandSpec | None:
        """The known header ``words`` names if each truncation between a node's short and
        long form (``OUTPU``) is read as that node, or None: SCPI-99 Vol. 1 §6.2.1 takes
        only the two forms, but a lenient parser may take the truncation as the header."""
        return spelled_between(self.table, self.between, words)

    def forbidden_under(self, words: tuple[str, ...]) -> str | None:
        """The ``forbidden_under`` subtree the header ``words`` is in, or None."""
        return next((p for p in self.model.forbidden_under if under(p, words)), None)

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

    def channel_word(self, channel: int) -> str:
        """How a channel-name parameter is written: the channel's first name (``CH1``)."""
        spec = self.model.channels.get(channel)
        return spec.names[0] if spec is not None and spec.names else str(channel)

    def boolean(self, text: str) -> bool | None:
        """An answer in the profile's boolean words (``ON`` -> True), or None."""
        words = self.model.booleans
        word = text.strip().strip('"').upper()
        return None if words is None or word not in words else word == words[1].upper()

    def has_field(self, field_name: str, channel: int | None) -> bool:
        """Whether ``channel`` has the field: its ``channels``, or a bit in ``bits``."""
        spec = self.model.fields[field_name]
        if channel is None:
            return True
        return (not spec.channels or channel in spec.channels) and (
            not spec.bits or channel in spec.bits)

    def register_bit(self, field_name: str, channel: int | None, text: str) -> bool:
        """The bit ``bits`` names for ``channel`` in a register's answer, read in the
        field's ``radix`` (hex: ``0x0010``, ``0X0010`` or ``0010``; decimal: ``16``).
        ValueError if the channel has no bit or the answer is no register in that radix
        (a sign, ``_`` or other digits): the state is then unknown, never off."""
        spec = self.model.fields[field_name]
        bit = spec.bits.get(channel) if channel is not None else None
        if bit is None:
            raise ValueError(f"no bit of the register says channel {channel}'s {field_name}")
        word = text.strip().strip('"')
        if not (RE_HEX_WORD if spec.radix == 16 else RE_DECIMAL_WORD).fullmatch(word):
            raise ValueError(f"{word!r} is no base-{spec.radix} register")
        return bool(int(word.removeprefix("0x").removeprefix("0X"), spec.radix or 10) >> bit & 1)

    def field_query(self, field_name: str, channel: int | None) -> str:
        return self.model.fields[field_name].query.format(ch=channel)

    def default_of(self, field_name: str, channel: int | None) -> Decimal | bool | str | None:
        """The field's *RST (``DEF``) value on ``channel``: the channel's own, else the
        field's ``default``."""
        spec = self.model.channels.get(channel) if channel is not None else None
        if spec is not None and field_name in spec.defaults:
            return spec.defaults[field_name]
        field = self.model.fields.get(field_name)
        return field.default if field is not None else None

    def limit_of(self, field_name: str) -> str:
        """The envelope key that bounds ``field_name``: its ``envelope``, else its name."""
        spec = self.model.fields.get(field_name)
        return spec.envelope if spec is not None and spec.envelope else field_name

    def lookup(self, common: bool, mnemonics: tuple[str, ...]) -> Entry | None:
        return self.table.get((common, mnemonics))

    def form_of(self, canonical: str) -> FormSpec | None:
        """The form a canonical unit was rendered from (``VOLT:NPLC 10.0`` -> its command
        form), or None for a unit the profile does not know."""
        key = canonical.split(" ", 1)[0]
        if key in self.forms:
            return self.forms[key]
        query = key.endswith("?")
        head = key.rstrip("?")
        common = head.startswith("*")
        words = tuple(w.rstrip("0123456789") for w in head.lstrip("*").split(":"))
        entry = self.lookup(common, words)
        form = None if entry is None else entry.command.query if query else entry.command.set
        if len(self.forms) < FORMS_KEPT:  # headers a client makes up are not kept forever
            self.forms[key] = form
        return form

    @classmethod
    def from_model(cls, model: ProfileModel) -> Profile:
        check_model(model)
        names: dict[str, int] = {}
        for number, spec in model.channels.items():
            for alias in spec.names:
                names[alias.upper()] = number
        for command in model.commands:  # a guide's keyword over 12 letters lexes
            LONG_KEYWORDS.update(n.long.upper() for n in parse_pattern(command.header)
                                 if len(n.long) > MAX_MNEMONIC)
        table, clashes = header_table(model)
        profile = cls(model, table, names, between=between_map(model), clashes=clashes)
        check_lock(profile)  # the lock section against the table (scpi/_lock.py)
        check_excitation(profile)  # how a meter is asked its function (scpi/_excitation.py)
        return profile


def _builtin_dir() -> Path:
    return Path(str(resources.files("bench_gate") / "profiles"))


def available_profiles() -> tuple[str, ...]:
    """Names of the profiles shipped with the package."""
    return tuple(sorted(p.stem for p in _builtin_dir().glob("*.yaml")))


#: Profiles loaded from a path, by their own name: a lab's profile is classified by name
#: (``classify(message, "my-psu")``) once its file has been loaded.
_BY_NAME: dict[str, Profile] = {}
#: Shipped profiles by name, once loaded (``_load`` keeps each file's profile for good).
_SHIPPED: dict[str, Profile] = {}


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
    known = _BY_NAME.get(name) or _SHIPPED.get(name)
    if known is not None:  # every read's decision asks: no path resolved, no stat
        return known
    path = (_builtin_dir() / f"{name}.yaml").resolve()
    if not re.fullmatch(r"[a-z0-9_-]+", name) or not path.is_file():
        raise ProfileError(
            f"no profile named {name!r}; the shipped ones are {', '.join(available_profiles())}"
        )
    profile = _SHIPPED[name] = _load(path)
    return profile


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
