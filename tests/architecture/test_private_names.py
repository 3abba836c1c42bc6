"""Tests use the project's public names only, read from the source with ``ast``: no test
imports a private module or name of ``bench_gate`` (or of the simulators), reads or patches
a private attribute they define, or names one in a string for ``getattr`` or
``monkeypatch``. Dunder names are public. A test's own classes may keep their own private
state (``self._x`` that the test file assigns itself)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
TESTS = ROOT / "tests"
#: The packages whose private names tests must not reach.
OURS = ("bench_gate", "sim_instruments")
#: Calls whose second argument names an attribute.
BY_NAME = {"getattr", "setattr", "delattr", "hasattr"}


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _ours(module: str) -> bool:
    return module.split(".")[0] in OURS


@cache
def defined_privates() -> frozenset[str]:
    """Every private name our packages define: functions, classes, module names, and the
    attributes they assign (``self._x = ...``)."""
    names: set[str] = set()
    for package in OURS:
        for path in (ROOT / package).rglob("*.py"):
            names.update(p for p in path.relative_to(ROOT).with_suffix("").parts if private(p))
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    names.add(node.name)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    names.add(node.id)
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                    names.add(node.attr)
                elif isinstance(node, ast.alias):
                    names.add(node.asname or node.name)
    return frozenset(n for n in names if private(n))


def own_privates(tree: ast.AST) -> set[str]:
    """The private names a test file defines itself: its functions, classes and module
    names, and what its classes assign on ``self`` or ``cls``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            names.add(node.attr)
    return {n for n in names if private(n)}


def reaches(path: Path, theirs: frozenset[str]) -> list[str]:
    """Each place ``path`` reaches a private name of ours, as ``line: what``."""
    tree = ast.parse(path.read_text(), str(path))
    mine = own_privates(tree)
    bad: list[str] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            bad += [f"{line}: import {a.name}" for a in node.names
                    if _ours(a.name) and any(map(private, a.name.split(".")))]
        elif isinstance(node, ast.ImportFrom) and node.module and _ours(node.module):
            if any(map(private, node.module.split("."))):
                bad.append(f"{line}: from {node.module} import ...")
            bad += [f"{line}: from {node.module} import {a.name}" for a in node.names
                    if private(a.name)]
        elif isinstance(node, ast.Attribute) and node.attr in theirs - mine:
            bad.append(f"{line}: .{node.attr}")
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            func = node.func
            name = func.id if isinstance(func, ast.Name) else \
                func.attr if isinstance(func, ast.Attribute) else ""
            arg = node.args[1] if name in BY_NAME else None
            if (isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                    and arg.value in theirs - mine):
                bad.append(f"{line}: {name}(..., {arg.value!r})")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and _ours(node.value) and "." in node.value
              and any(map(private, node.value.split(".")))):
            bad.append(f"{line}: {node.value!r}")
    return bad


def _files() -> list[Path]:
    """Every module under tests/ with code in it (a package's docstring reaches nothing)."""
    def code(path: Path) -> bool:
        tree = ast.parse(path.read_text(), str(path))
        return len(tree.body) > (1 if ast.get_docstring(tree) is not None else 0)

    return sorted(p for p in TESTS.rglob("*.py") if code(p))


def test_the_rule_sees_every_kind_of_reach(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "import bench_gate.scpi._lexer\n"
        "from bench_gate.store._chain import link\n"
        "from bench_gate.cli import _legacy_journal\n"
        "store._tx()\n"
        "monkeypatch.setattr(units, '_quote', None)\n"
        "monkeypatch.setattr('bench_gate.scpi._units.render_value', None)\n"
        "class Own:\n"
        "    def __init__(self):\n"
        "        self._tx = 1\n"
        "        self.__dict__\n")
    theirs = defined_privates()
    assert {"_tx", "_quote", "_legacy_journal"} <= theirs
    found = reaches(sample, theirs - {"_tx"})  # the file's own ``self._tx`` is its own
    assert [f.split(":")[0] for f in found] == ["1", "2", "3", "5", "6"], found
    assert reaches(sample, theirs)  # and ``store._tx()`` is caught when it is not


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(TESTS)))
def test_no_test_reaches_a_private_name(path: Path) -> None:
    bad = reaches(path, defined_privates())
    assert not bad, f"{path.relative_to(ROOT)} reaches private names: {bad}"
