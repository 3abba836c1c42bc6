"""What a pyvisa-sim device definition declares, read once for a simulated instrument: its
properties (getter, setter, type, default), every query it answers, and its no-error entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Prop", "answerable", "dialogue_queries", "no_error", "props"]

_TYPES: dict[str, type[int] | type[float] | type[str]] = {"int": int, "float": float, "str": str}


def _num(value: float) -> str:
    # pyvisa-sim's {:f} fields want a point and digits, never an exponent.
    return f"{value:.9f}"


@dataclass(frozen=True)
class Prop:
    """One pyvisa-sim property, as bench.yaml declares it."""

    name: str
    getter: str | None
    setter: str | None
    kind: type[int] | type[float] | type[str]
    default: str

    quoted: bool = False  # the getter answers string data: "VOLT"

    def parse(self, text: str) -> int | float | str:
        if self.quoted and len(text) >= 2 and text[0] == text[-1] == '"':
            text = text[1:-1]
        return self.kind(float(text)) if self.kind is int else self.kind(text)

    def set_command(self, value: int | float | str) -> str:
        if self.setter is None:
            raise ValueError(f"property {self.name!r} has no setter")
        if self.kind is float:
            return self.setter.replace("{:f}", _num(float(value)))
        return self.setter.format(value)


def props(device: Mapping[str, Any]) -> dict[str, Prop]:
    out: dict[str, Prop] = {}
    for name, spec in device.get("properties", {}).items():
        kind = _TYPES[spec.get("specs", {}).get("type", "str")]
        getter = spec["getter"]["q"].strip() if "getter" in spec else None
        setter = spec["setter"]["q"].strip() if "setter" in spec else None
        quoted = "getter" in spec and str(spec["getter"].get("r", "")).startswith('"')
        out[name] = Prop(name, getter, setter, kind, spec.get("default", ""), quoted)
    return out


def answerable(device: Mapping[str, Any]) -> frozenset[str]:
    """Every query pyvisa-sim answers; anything else would leave a read waiting. A dialogue
    ``"MMEM:UPL? *"`` answers that query whatever its parameters (the simulator's reading)."""
    out = {d["q"].strip() for d in device.get("dialogues", ()) if "r" in d}
    out |= {p["getter"]["q"].strip() for p in device.get("properties", {}).values()
            if "getter" in p}
    error = device.get("error", {})
    if isinstance(error, Mapping):
        for key in ("status_register", "error_queue"):
            out |= {entry["q"].strip() for entry in error.get(key, ())}
    return frozenset(out)


def dialogue_queries(device: Mapping[str, Any]) -> frozenset[str]:
    return frozenset(d["q"].strip() for d in device.get("dialogues", ()))


def no_error(device: Mapping[str, Any]) -> str:
    error = device.get("error", {})
    queues = error.get("error_queue", ()) if isinstance(error, Mapping) else ()
    if not queues:
        raise ValueError("the bench definition needs an error_queue for SYST:ERR?")
    return str(queues[0]["default"])
