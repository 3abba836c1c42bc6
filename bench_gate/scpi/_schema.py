"""The profile schema: what a profile file may say, validated as it is read.

A profile is a YAML data file (``bench_gate/profiles/<name>.yaml``); these pydantic models
are its grammar (commands, forms, parameters, fields, channels, the safe action) and
``Effect``, the vocabulary of what a header does (DESIGN.md). A new section of the file is a
new model here and a field of :class:`ProfileModel`; its consistency checks go in
``_profile.py`` (``_checks``), where the loaded profile is compiled.
"""

from __future__ import annotations

import enum
import re
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ._excitation import ExcitationSpec
from ._lock import LockSpec

__all__ = [
    "AddressingSpec",
    "ChannelMode",
    "ChannelSpec",
    "CommandSpec",
    "Effect",
    "FieldSpec",
    "FormSpec",
    "InstrumentKind",
    "MeterSafeSpec",
    "ParamSpec",
    "ParamType",
    "ProfileError",
    "ProfileModel",
    "SafeActionSpec",
    "TimingRole",
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
                    "minmax", "word", "channels"]
#: The settings that decide how long a reading takes (scpi._timing).
TimingRole = Literal["nplc", "aperture", "samples", "triggers", "trigger_delay",
                     "sample_interval"]
#: What kind of instrument a profile describes: the handoff's words follow it (a meter has
#: no outputs).
InstrumentKind = Literal["supply", "meter", "load", "smu", "other"]
#: ``all``: the form reaches every channel (one unit, no channel). ``every``: one command
#: switches every channel at once (the E3631A's ``OUTPut``): one unit per channel, each
#: judged, approved and read back as its channel's; no channel list is taken.
ChannelMode = Literal["none", "list", "param", "suffix", "all", "every"]


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
    #: Takes up to this many comma-separated values (``<value>{,<value>}``: a list's points),
    #: each typed and ranged like one; only the last parameter may. 0: one value.
    repeat: int = Field(default=0, ge=0)
    #: Why values outside ``choices`` or ``range`` are refused, when the instrument takes
    #: more than the profile lets through (series and parallel pairing): said in the error.
    refused: str = ""


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
    #: Makes a meter measure with the function configured now (``READ?``, ``INIT``,
    #: ``*TRG``): on a profile with ``excitation``, the gateway asks the instrument which
    #: function that is before it passes (scpi/_excitation.py).
    measures: bool = False
    #: Puts the instrument's own channel selection back to its power-on one (the E3631A's
    #: ``*RST`` selects the +6V output): after it, a connection's selection is the
    #: profile's ``addressing.default`` again, as a unit after it means on the instrument.
    #: ``recalled``: to the one a stored state holds (the E3631A's ``*RCL`` restores
    #: INST[:SEL]), known only once it ran: read then (``addressing.query``) as the run's
    #: selection; a unit after it in the same message that names no channel is refused.
    reselects: bool | Literal["recalled"] = False
    #: The instrument's stored states (IEEE 488.2 §10.29 ``*SAV``, §10.27 ``*RCL``; a
    #: state file): ``save`` stores the present state under its first parameter (a slot,
    #: a file name), ``recall`` brings one back, ``forget`` may change what any holds
    #: (a file deleted, copied or moved). The gateway records the state it saw saved and
    #: judges a recall on it before sending (bench_gate/memories.py).
    memory: Literal["save", "recall", "forget"] | None = None
    #: For a ``memory: recall``: the fields the instrument's manual says it brings back.
    #: The gateway predicts them from its record; any other field the record holds is
    #: judged at its stored and its live value both (memories.mixes).
    restores: tuple[str, ...] = ()
    #: Clears a latched protection that switched the channel's output off: the output comes
    #: back to the state it was in before the trip (Keysight, OUTPut:PROTection:CLEar),
    #: at whatever levels the channel holds then. The gateway judges the channel as on
    #: before it is sent, whatever its output reads now.
    revives: bool = False


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

    #: The words that name the channel in a parameter (``CH1``); the first is how the
    #: gateway writes it (``OUTP CH1,ON``).
    names: tuple[str, ...] = ()
    ranges: dict[str, tuple[Decimal, Decimal]] = Field(default_factory=dict)
    #: A field's *RST (``DEF``) value on this channel, where it differs from the field's
    #: ``default`` (the E3631A's +6V output resets its current limit to 5 A, the others to
    #: 1 A: User's Guide, Table 4-1).
    defaults: dict[str, Decimal] = Field(default_factory=dict)


class FieldSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    type: Literal["number", "boolean", "text"] = "number"
    unit: str = ""
    query: str
    default: Decimal | bool | str | None = None
    #: Measured fields are shown, never snapshotted for approval.
    measured: bool = False
    #: A condition register read as bits: bit number -> the word shown while it is set
    #: (a supply's CV/CC mode). Shown, never compared as a number.
    flags: dict[int, str] = Field(default_factory=dict)
    #: A boolean read from a register's bit: channel -> bit number (the SPD3303X's
    #: ``SYST:STAT?`` bit 4 is CH1's output). A channel with no bit cannot be read: its
    #: state is unknown, never assumed off.
    bits: dict[int, int] = Field(default_factory=dict)
    #: How the register ``bits`` reads is written, as its guide says: 16 (the SPD3303X's
    #: ``SYST:STAT?`` answers ``0x0224``, hex with or without the ``0x``) or 10 (<NR1>, as
    #: IEEE 488.2's registers). Required with ``bits``: ``10`` read as decimal is bit 1 and
    #: bit 3, read as hex bit 4, so a guess could read an output on as off.
    radix: Literal[10, 16] | None = None
    #: The channels that have this field (the SPD3303X's fixed CH3 has no setpoint); empty:
    #: every channel. A snapshot does not read it elsewhere, and the envelope counts it
    #: unreadable there (outside).
    channels: tuple[int, ...] = ()
    #: The bench limit (an envelope key) that bounds this field's magnitude, for a field
    #: that bounds what reaches the DUT under another name: an SMU's current level and its
    #: voltage limit. A field named like the key (voltage, current, ovp) is bounded by it.
    envelope: Literal["voltage", "current", "ovp"] | None = None
    #: The step a person reads this field in (its programming resolution): a value is shown
    #: rounded to it, ``0.001`` (the default) is ``3.300 V``; an SMU's current in ``1E-7``.
    resolution: Decimal = Decimal("0.001")
    #: While this boolean field is on, the instrument copies fields into others: the
    #: E36312A's tracking (OUTPut:TRACk) makes CH3's voltage setpoint follow CH2's. Keys as
    #: in a snapshot (``ch2.voltage: [ch3.voltage]``); the predicted state applies them, so
    #: a CH2 setpoint is judged on CH3 too. A target written ``-ch3.voltage`` takes the
    #: opposite sign (the E3631A's -25V output tracking its +25V output).
    copies: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    #: Levels stored for a later trigger (a triggered level, a list's points), read as
    #: numbers joined by ``,`` (Keysight's ``LIST:VOLT?``): each point is judged against
    #: the field's limit, the largest magnitude deciding. Not part of the channel's
    #: setpoint: a trigger, not a setpoint approval, puts them on the output.
    points: bool = False
    #: For a stored level the instrument answers with another field's value while none is
    #: programmed (the E3631A's ``VOLTage:TRIGgered?``: "if no triggered level is
    #: programmed, the VOLTage level is returned"): where the snapshot shows the two equal,
    #: the predicted state moves this one with that field. A programmed level that only
    #: happens to be equal is then judged by the read-back, which reads it.
    follows: str | None = None
    #: A mode in which the bench's limits bound what the channel does: the values (as the
    #: snapshot holds them, any case) under which they do. An energized channel with any
    #: other value, or an unread one, is outside the envelope (the DL3021's short-circuit
    #: and list modes draw what no level names), wherever the mode was set.
    bounded_when: tuple[str, ...] = ()
    #: A text field whose answer is one word, character response data (IEEE 488.2 §8.7.1:
    #: a letter, then letters, digits and ``_``; never a ``;``), as a mode's ``OFF|PAR|SER``:
    #: it may join a compound query (scpi/compound.py). An answer that is not one word is an
    #: I/O failure, never a value.
    word: bool = False
    #: For a text field that says what a channel still does while its safe-action field
    #: reads off (an SMU's output-off state): each value (as the snapshot holds it, any
    #: case) -> the bounded fields still in force then. A value with none holds nothing the
    #: envelope bounds (the 2450's HIMPedance opens the output relay). An off channel with
    #: this field at an unlisted value, or unread, is judged as energized: every bounded field.
    off_holds: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    #: For a boolean that says whether the protection an envelope key bounds acts at all
    #: (the E36312A's VOLTage:PROTection:STATe): where a channel's limits have that key, an
    #: energized channel with it off, or unread, is outside: the level protects nothing.
    guards: Literal["voltage", "current", "ovp"] | None = None

    @model_validator(mode="after")
    def _radix_with_bits(self) -> FieldSpec:
        if self.bits and self.radix is None:
            raise ValueError("a field read from a register's bits names the register's "
                             "radix (16 or 10, as the instrument's guide writes it)")
        return self


class SafeActionSpec(BaseModel):
    """What makes one channel safe at once (output off), and which field says it is live."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The boolean field that is true while the channel drives the DUT (output, input).
    field: str
    #: The command that makes one channel safe; ``{ch}`` is the channel number.
    command: str


class MeterSafeSpec(BaseModel):
    """A meter's safe action (it has no outputs): the command that leaves it measuring in
    a passive function, aborting a measurement in progress. Its read-back is the profile's
    ``excitation`` query: only a function the excitation spec calls passive shows it safe."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The whole instrument's command (no ``{ch}``): ``ABOR;:FUNC "VOLT"``.
    command: str


class AddressingSpec(BaseModel):
    """An instrument that addresses channels by selection, not by channel list (the
    E3631A: ``INSTrument:NSELect``, then ``VOLTage`` acts on the selected output). The
    gateway keeps its canonical units with their channel lists; on the wire each unit that
    names a channel is sent as the select command, then the unit without its list, in the
    same lane turn. The instrument's own selection is never trusted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The query that reads the instrument's own selection (``INST:NSEL?``): asked only
    #: after a form that ``reselects: recalled`` ran.
    query: str | None = None
    #: The command that selects a channel; ``{ch}`` is its number (``INST:NSEL {ch}``).
    #: None: a single-channel instrument (the DL3021 load): its one channel's units go out
    #: without a list, and nothing selects it.
    select: str | None = None
    #: The channel a connection has selected before it selects one (the instrument's
    #: power-on selection), never asked of the instrument.
    default: int


class ProfileModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    title: str
    #: The start of the instrument's ``*IDN?`` answer: its manufacturer and model fields
    #: (``Keysight Technologies,E36312A``). Checked at every connection and every snapshot:
    #: another instrument answering is refused everything (identity.py). "": any (generic).
    identity: str = ""
    #: Other identities of the same model (a vendor renamed: HP, Agilent, Keysight).
    identities: tuple[str, ...] = ()
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
    #: IEEE 488.2 / SCPI-99 mandatory headers the instrument's manual does not have
    #: (``STAT:OPER?``): ``profile check`` does not ask for them; a complete profile
    #: refuses them (-113), as the instrument does.
    lacks: tuple[str, ...] = ()
    #: Subtrees that set how the instrument is reached (``SYSTem:COMMunicate``: its LAN
    #: address, GPIB address, serial settings): a new one cuts the gateway off, and with it
    #: every output's safe action. The command form of any header under one is forbidden
    #: (-203), listed or not, never held as unknown; a listed header there must say so.
    forbidden_under: tuple[str, ...] = ()
    #: Channels addressed by selection (AddressingSpec); None: by channel list or suffix.
    addressing: AddressingSpec | None = None
    #: The instrument answers several queries in one program message, their answers joined
    #: by ';' in one response message (IEEE 488.2 §7.4.1, §8.4.1): a snapshot's number and
    #: boolean fields and ``*IDN?`` are read in one message (scpi/compound.py). Only for an
    #: instrument whose manual and simulator answer so; never with ``addressing``.
    compound_queries: bool = False
    #: The safe action (DESIGN.md): applied at once when a channel leaves the envelope, and
    #: by an emergency stop. A meter's (no ``field``) puts it in a passive function.
    safe_action: SafeActionSpec | MeterSafeSpec | None = None
    #: The words the instrument writes and answers for a boolean, false then true (the
    #: DP832's ``OFF``, ``ON``): booleans are rendered in them and their answers read back
    #: from them. None: 0 and 1 (SCPI-99 Vol. 1 §7.3).
    booleans: tuple[str, str] | None = None
    #: How the instrument is locked to the gateway (scpi/_lock.py); None: not lockable.
    lock: LockSpec | None = None
    #: How to ask a meter which function it measures now, and which functions drive the DUT
    #: (scpi/_excitation.py); None: no form ``measures``.
    excitation: ExcitationSpec | None = None
    commands: tuple[CommandSpec, ...]

    @field_validator("identity", "identities")
    @classmethod
    def _identity(cls, v: str | tuple[str, ...]) -> str | tuple[str, ...]:
        """An identity names the manufacturer and the model (a serial may follow): fewer
        fields fit every model of the maker, or nothing is checked (identity.py)."""
        for text in (v,) if isinstance(v, str) else v:
            if isinstance(v, str) and not text:
                continue  # "": no identity (generic)
            named = [re.sub(r"[\W_]+", "", f.casefold())
                     for f in text.strip().strip('"').split(",")]
            while named and not named[-1]:
                named.pop()
            if len(named) < 2 or not all(named):
                raise ValueError(
                    f"identity {text!r} does not name a manufacturer and model (the first "
                    "two fields of *IDN?, e.g. 'Keysight Technologies,E36312A'): another "
                    "model, or any instrument, would fit it")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z0-9_-]+", v):
            raise ValueError("profile names are lower-case letters, digits, '-' and '_'")
        return v

