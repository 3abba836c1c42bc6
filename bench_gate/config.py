"""Bench configuration (``bench.toml``), validated with pydantic.

A bad file gets an error naming the key and the problem, never a traceback.
"""

from __future__ import annotations

import os
import tomllib
from decimal import Decimal
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import InvalidInput

__all__ = [
    "BenchConfig",
    "ChannelLimits",
    "ConfidenceConfig",
    "Costs",
    "InstrumentConfig",
    "JournalConfig",
    "LimitsConfig",
    "PolicyConfig",
    "ServerConfig",
    "default_config",
    "load_config",
]


def data_dir() -> Path:
    """``$BENCH_GATE_HOME``, else ``$XDG_DATA_HOME/bench-gate`` (``~/.local/share``)."""
    home = os.environ.get("BENCH_GATE_HOME")
    if home:
        return Path(home)
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "bench-gate"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InstrumentConfig(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$")
    #: A pyvisa resource string: ``TCPIP0::192.168.1.20::inst0::INSTR``.
    resource: str
    profile: str
    #: pyvisa backend: "@py" (pyvisa-py), "@ivi", or "<path>@sim".
    backend: str = "@py"
    timeout_ms: int = Field(default=2000, ge=50, le=120_000)
    #: The longest one reading may take, in seconds: a query that takes a reading waits
    #: ``timeout_ms`` plus what its settings need, never more than this, and a setting that
    #: would make every reading longer is refused (scpi._timing).
    max_reading_s: float = Field(default=60.0, gt=0, le=3600)
    read_termination: str = "\n"
    write_termination: str = "\n"
    #: How the gateway talks to it: "auto" reaches a raw-socket resource (``::SOCKET``) with
    #: asyncio streams and everything else through pyvisa; "pyvisa" uses pyvisa for all.
    io: Literal["auto", "pyvisa"] = "auto"
    #: The socket door's port for this instrument (raw SCPI), if any.
    socket_port: int | None = Field(default=None, ge=0, le=65535)


class ChannelLimits(_Strict):
    """Hard limits for one channel: nothing above them runs, approved or not."""

    voltage: Decimal | None = None
    current: Decimal | None = None
    ovp: Decimal | None = None


class PolicyConfig(_Strict):
    default_timeout_minutes: int = Field(default=30, ge=1, le=1440)
    max_timeout_minutes: int = Field(default=1440, ge=1, le=1440)
    #: Turning an output off runs unattended when it is the bench's safe action.
    output_off_is_safe: bool = False
    #: The two approvals of an output enable must come from two different people.
    two_person_output_enable: bool = False
    #: Every approval must come from someone other than the requester, engineers included.
    independent_approver: bool = False
    #: A run is suspended after this many denials in a row, or this many in total.
    denials_in_a_row: int = Field(default=3, ge=1)
    denials_total: int = Field(default=20, ge=1)
    #: A run that switched an output on must be heard from (a connected socket door or
    #: MCP session, any submit, or a heartbeat) at least this often (bench_gate/leases.py).
    lease_seconds: float = Field(default=600, gt=0, le=86_400)
    #: When its lease runs out: ``safe`` switches the outputs it energized off, ``hold``
    #: keeps them and alerts the operators. Journaled either way.
    on_client_lost: Literal["safe", "hold"] = "safe"
    #: How often every enveloped field is read again while nobody writes (bench_gate/
    #: watch.py): a level an instrument applies on its own (a timer, a list, a trigger, the
    #: front panel) is made safe within this time. 0 leaves it to the next write's read-back.
    watch_seconds: float = Field(default=1.0, ge=0, le=3600)


class Costs(_Strict):
    """What a human review costs against what a wrong unattended action costs."""

    review: float = Field(gt=0)
    wrong: float = Field(gt=0)


class ConfidenceConfig(_Strict):
    """The confidence gate for agent writes a plan would let through (off by default).

    The environment overrides the file: BENCH_GATE_CONFIDENCE_GATE, _THRESHOLD, _ESTIMATOR,
    _SAMPLES, _CALIBRATE, _ENDPOINT, _MODEL.
    """

    enabled: bool = False
    threshold: float = Field(default=0.75, ge=0, le=1)
    estimator: Literal["verbalization", "self-consistency"] = "verbalization"
    samples: int = Field(default=5, ge=1)
    calibrate: bool = False
    #: The score of a write that states no confidence. Silence is not confidence: 0.
    fallback: float = Field(default=0.0, ge=0, le=1)
    #: An OpenAI-compatible chat-completions URL for self-consistency.
    endpoint: str | None = None
    model: str = "default"
    #: The longest the self-consistency estimator may take for all its samples; past it the
    #: estimate fails and the write goes to a person.
    timeout_seconds: float = Field(default=10.0, gt=0, le=120)
    #: Per effect (setpoint, output_enable, state): threshold = 1 - review / wrong.
    costs: dict[str, Costs] = Field(default_factory=dict)


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    #: Peers allowed on the socket doors (exact addresses).
    allowed_peers: list[str] = Field(default_factory=lambda: ["127.0.0.1", "::1"])
    #: The largest HTTP request body accepted, before authentication; a larger one is
    #: refused with 413 without being read (1 MiB).
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024, le=1024 * 1024 * 1024)


RoleName = Literal["requester", "operator", "admin"]
_DECIDERS: tuple[RoleName, ...] = ("operator", "admin")


class LimitsConfig(_Strict):
    """Per-requester quotas (``[limits]``): how much one requester may hold at once. Past
    a quota the doors answer 429 (HTTP), a -200 error (socket door) or a tool error (MCP),
    naming the quota. The roles in ``exempt_roles`` (people who decide: operators and
    admins, by default) have none."""

    #: Requests waiting for a decision, across all of the requester's runs.
    pending_requests: int = Field(default=200, ge=1)
    #: Runs not closed (a socket-door connection's or MCP session's run closes with it; an
    #: HTTP run with ``POST /v1/runs/{id}/close``).
    open_runs: int = Field(default=500, ge=1)
    #: Live MCP sessions on ``/mcp``.
    mcp_sessions: int = Field(default=20, ge=1)
    #: Open event streams (``/v1/events`` and the console's ``/events``).
    sse_streams: int = Field(default=10, ge=1)
    exempt_roles: list[RoleName] = Field(default_factory=lambda: list(_DECIDERS))


#: ``[journal] keep_days`` and ``journal archive --keep-days``: 1 to 100 years of days.
MAX_KEEP_DAYS = 36525


class JournalConfig(_Strict):
    """The journal's retention (``[journal]``). Off by default: every event stays in the
    store. With ``keep_days``, events older than that are archived to segment files (JSON
    Lines, hash chain included) and deleted from the store; ``bench-gate journal verify``
    checks the segments and the store as one chain (docs/interlocks.md)."""

    #: Archive events older than this many days; unset keeps every event in the store.
    #: At most 100 years: a date further back than that is none a clock can subtract.
    keep_days: int | None = Field(default=None, ge=1, le=MAX_KEEP_DAYS)
    #: Where segment files go; unset: ``journal-archive`` beside a SQLite store's file, or
    #: in the data directory for PostgreSQL.
    archive_dir: str | None = None
    #: The read log's file (bench_gate/store/_readlog.py); unset: beside a SQLite store's
    #: file, or ``read-logs`` in the data directory for PostgreSQL, one per bench.
    read_log: str | None = None
    #: How long a read may wait in the read log before it is folded into the journal (any
    #: other event, and any read of the journal, folds it first).
    fold_seconds: float = Field(default=0.05, gt=0, le=60)


class SocketDoorConfig(_Strict):
    """``[socket_door]``: how a raw-SCPI connection meets a write that waits for a person."""

    #: ``wait``: the connection holds the stream until the write is decided (the default);
    #: ``refuse``: the write is answered at once with -203 and its request id, and the
    #: script resends it once approved. A connection changes it with ``GATE:HOLD``.
    on_hold: Literal["wait", "refuse"] = "wait"
    #: What a connection that sent no token (``GATE:TOK``) may do. ``read-write``: reads, and
    #: writes held for a person as ``script@<address>``; ``read``: reads only, every write
    #: refused (-203). With ``read``, whoever approves a write knows who asked for it: an
    #: operator cannot pass her own write through an anonymous connection and approve it.
    anonymous: Literal["read-write", "read"] = "read-write"


class BenchConfig(_Strict):
    bench: str = "bench"
    instruments: list[InstrumentConfig]
    #: instrument name -> channel number -> limits
    envelope: dict[str, dict[int, ChannelLimits]] = Field(default_factory=dict)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    confidence: ConfidenceConfig = Field(default_factory=ConfidenceConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    journal: JournalConfig = Field(default_factory=JournalConfig)
    socket_door: SocketDoorConfig = Field(default_factory=SocketDoorConfig)

    @model_validator(mode="after")
    def _consistent(self) -> BenchConfig:
        names = [i.name for i in self.instruments]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"instrument names must be unique: {sorted(dupes)}")
        unknown = set(self.envelope) - set(names)
        if unknown:
            raise ValueError(f"envelope names unknown instruments: {sorted(unknown)}")
        if self.policy.default_timeout_minutes > self.policy.max_timeout_minutes:
            raise ValueError("policy.default_timeout_minutes is above max_timeout_minutes")
        return self

    def instrument(self, name: str) -> InstrumentConfig | None:
        return next((i for i in self.instruments if i.name == name), None)


def default_config(psu_port: int = 5555, dmm_port: int = 5556) -> BenchConfig:
    """The simulated bench: the PSU and DMM served as LAN instruments on 127.0.0.1."""
    return BenchConfig(
        bench="sim-bench",
        instruments=[
            InstrumentConfig(name="psu", resource=f"TCPIP0::127.0.0.1::{psu_port}::SOCKET",
                             profile="e36312a", socket_port=5025),
            InstrumentConfig(name="dmm", resource=f"TCPIP0::127.0.0.1::{dmm_port}::SOCKET",
                             profile="34465a", socket_port=5026),
        ],
        envelope={"psu": {
            1: ChannelLimits(voltage=Decimal(6), current=Decimal(1)),
            2: ChannelLimits(voltage=Decimal(12), current=Decimal("0.5")),
            3: ChannelLimits(voltage=Decimal(12), current=Decimal("0.5")),
        }},
    )


def load_config(path: str | Path) -> BenchConfig:
    """Read and validate a ``bench.toml``; raise InvalidInput naming the key and problem."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidInput(f"cannot read {str(path)!r}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{path}: not valid TOML: {exc}") from exc
    try:
        return BenchConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise InvalidInput(f"{path}: {problems}") from exc
