"""The doors' import rules, read from the source with ``ast``: a door (the HTTP API, MCP,
the socket door, the console, the CLI's commands against a server) reaches the gateway only
through its façade. No door imports another door, the store or ``instruments``, and none
reads ``store``, ``instruments`` or ``metrics`` off the gateway."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent.parent / "bench_gate"
#: Each door and the modules that are it.
DOORS = {
    "api": sorted((PACKAGE / "api").glob("*.py")),
    "mcp": sorted((PACKAGE / "mcp").glob("*.py")),
    "proxy": sorted((PACKAGE / "proxy").glob("*.py")),
    "web": sorted((PACKAGE / "web").glob("*.py")),
    "cli": [PACKAGE / "_cli_remote.py", PACKAGE / "_cli_decide.py"],
}
#: The first name under ``bench_gate`` of each door's modules.
DOOR_ROOTS = {"api": {"api"}, "mcp": {"mcp"}, "proxy": {"proxy"}, "web": {"web"},
              "cli": {"cli", "_cli_common", "_cli_local", "_cli_remote", "_cli_decide"}}
FORBIDDEN = {"store", "instruments"}
GATEWAY_NAMES = {"gw", "gateway"}
PRIVATE_PARTS = {"store", "instruments", "metrics"}


def imported(path: Path, root: Path = PACKAGE) -> list[tuple[int, list[str]]]:
    """Every module ``path`` imports, as the names under ``bench_gate`` (relative imports
    resolved), with its line."""
    package = ["bench_gate", *path.relative_to(root).parent.parts]
    out: list[tuple[int, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name.split(".")) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                names = [*base, *(node.module.split(".") if node.module else [])]
            else:
                names = (node.module or "").split(".")
            out.extend((node.lineno, [*names, a.name]) for a in node.names)
    return [(line, names[1:]) for line, names in out if names and names[0] == "bench_gate"]


def reads_off_gateway(path: Path) -> list[tuple[int, str]]:
    """``gw.store``, ``self.gateway.instruments``...: parts of the core read past the
    façade."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_PARTS:
            owner = node.value
            name = owner.id if isinstance(owner, ast.Name) else \
                owner.attr if isinstance(owner, ast.Attribute) else None
            if name in GATEWAY_NAMES:
                found.append((node.lineno, f"{name}.{node.attr}"))
    return found


def _cases() -> list[tuple[str, Path]]:
    return [(door, path) for door, paths in DOORS.items() for path in paths]


def test_every_door_is_checked() -> None:
    assert all(DOORS.values())
    assert {door for door, _ in _cases()} == set(DOORS)


@pytest.mark.parametrize(("door", "path"), _cases(),
                         ids=[f"{d}/{p.name}" for d, p in _cases()])
def test_a_door_imports_no_other_door_nor_the_store(door: str, path: Path) -> None:
    others = set().union(*(roots for d, roots in DOOR_ROOTS.items() if d != door))
    bad = [f"line {line}: bench_gate.{'.'.join(names)}" for line, names in imported(path)
           if names and (names[0] in FORBIDDEN or names[0] in others)]
    assert not bad, f"{path.relative_to(PACKAGE.parent)} imports past the façade: {bad}"


@pytest.mark.parametrize(("door", "path"), _cases(),
                         ids=[f"{d}/{p.name}" for d, p in _cases()])
def test_a_door_reads_no_part_of_the_core(door: str, path: Path) -> None:
    bad = reads_off_gateway(path)
    assert not bad, f"{path.relative_to(PACKAGE.parent)} reads past the façade: {bad}"


def test_the_checks_catch_what_they_forbid(tmp_path: Path) -> None:
    root = tmp_path / "bench_gate"
    fake = root / "web" / "_example.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("from ..store import Store\nfrom ..api import create_app\n"
                    "from bench_gate import instruments\nimport bench_gate.mcp._core\n"
                    "x = gw.store.kv_get\ny = self.gateway.metrics\n"
                    "z = gw.config.instruments\n")
    names = [n[0] for _, n in imported(fake, root)]
    assert names == ["store", "api", "instruments", "mcp"]
    assert sorted(r for _, r in reads_off_gateway(fake)) == ["gateway.metrics", "gw.store"]
