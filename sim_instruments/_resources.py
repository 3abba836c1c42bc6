"""Where the bench definition lives, and the resource names it declares."""

from __future__ import annotations

import copy
import functools
import importlib.resources
import pathlib
import shutil
import tempfile
import threading
from typing import Any

import pyvisa
import pyvisa_sim.parser
import yaml

__all__ = [
    "DMM_PROFILE",
    "DMM_RESOURCE",
    "PSU_PROFILE",
    "PSU_RESOURCE",
    "bench_yaml_path",
    "load_definition",
    "open_fresh_resource_manager",
    "open_resource_manager",
]

#: pyvisa-sim resource names declared in bench.yaml.
PSU_RESOURCE = "TCPIP0::sim-psu::5025::SOCKET"
DMM_RESOURCE = "TCPIP0::sim-dmm::5025::SOCKET"

#: bench_gate.scpi profile names of the two simulated models.
PSU_PROFILE = "e36312a"
DMM_PROFILE = "34465a"

_BENCH_YAML = "bench.yaml"


def bench_yaml_path() -> pathlib.Path:
    """Path of the packaged pyvisa-sim definition (``sim_instruments/bench.yaml``)."""
    resource = importlib.resources.files(__package__).joinpath(_BENCH_YAML)
    path = pathlib.Path(str(resource))
    if not path.is_file():
        # pyvisa-sim needs a real file; a zipped install would need extracting first.
        raise FileNotFoundError(f"expected the bench definition at {str(path)!r}")
    return path


def open_resource_manager(definition: pathlib.Path | None = None) -> pyvisa.ResourceManager:
    """The pyvisa-sim resource manager for ``definition`` (default: the packaged bench).

    pyvisa caches one library per path, so every call with the same path shares the same
    simulated instruments (and the same ResourceManager) for the life of the process.
    Use :func:`open_fresh_resource_manager` for instruments of your own.
    """
    path = definition if definition is not None else bench_yaml_path()
    return pyvisa.ResourceManager(f"{path}@sim")


#: pyvisa-sim's parse of a definition file, by its text: parsing the bench (64 kB, pyyaml's
#: pure-Python loader) took most of a fresh bench's start (0.3 s to 2 s on a busy machine),
#: and every test's bench starts one. Each library still gets a deep copy of its own.
_PARSED: dict[str, dict[str, Any]] = {}
_PARSED_LOCK = threading.Lock()
_parse_file = pyvisa_sim.parser.parse_file


def _parse_file_once(fullpath: str | pathlib.Path) -> dict[str, Any]:
    """``pyvisa_sim.parser.parse_file``, parsing each distinct text once per process."""
    text = pathlib.Path(fullpath).read_text(encoding="utf-8")
    with _PARSED_LOCK:
        if text not in _PARSED:
            _PARSED[text] = _parse_file(fullpath)
        return copy.deepcopy(_PARSED[text])


pyvisa_sim.parser.parse_file = _parse_file_once


def open_fresh_resource_manager(
    definition: pathlib.Path | None = None,
) -> pyvisa.ResourceManager:
    """A resource manager over new simulated instruments, in their default state.

    pyvisa-sim parses the file once, when the library opens, so a private copy under a
    unique path gives a private library; the copy is removed straight away. (The parse of
    a text seen before is a deep copy of the first one: :func:`_parse_file_once`.)
    """
    source = definition if definition is not None else bench_yaml_path()
    with tempfile.TemporaryDirectory(prefix="sim-bench-") as tmp:
        copy = pathlib.Path(tmp) / source.name
        shutil.copyfile(source, copy)
        return pyvisa.ResourceManager(f"{copy}@sim")


def load_definition(definition: pathlib.Path | None = None) -> dict[str, Any]:
    """The bench definition as pyvisa-sim reads it (every scalar a str)."""
    path = definition if definition is not None else bench_yaml_path()
    return _parse(path)


def cached_definition(definition: pathlib.Path | None = None) -> dict[str, Any]:
    """:func:`load_definition`, parsed once per path; the models only read it."""
    path = definition if definition is not None else bench_yaml_path()
    return _cached_parse(path.resolve())


def _parse(path: pathlib.Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as fp:
        data = yaml.load(fp, Loader=yaml.BaseLoader)
    if not isinstance(data, dict):
        raise ValueError(f"expected a mapping in {str(path)!r}, got {type(data).__name__}")
    return data


_cached_parse = functools.lru_cache(maxsize=8)(_parse)
