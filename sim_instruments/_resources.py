"""Where the bench definition lives, and the resource names it declares."""

from __future__ import annotations

import functools
import importlib.resources
import pathlib
import shutil
import tempfile
from typing import Any

import pyvisa
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


def open_fresh_resource_manager(
    definition: pathlib.Path | None = None,
) -> pyvisa.ResourceManager:
    """A resource manager over new simulated instruments, in their default state.

    pyvisa-sim parses the file once, when the library opens, so a private copy under a
    unique path gives a private library; the copy is removed straight away.
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
