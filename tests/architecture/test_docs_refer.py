"""What README.md and docs/ point a reader to exists: each relative link and its anchor,
each repository path in backticks (``tests/core/test_x.py``), and each ``NAME.md`` named in
the text (docs once sent readers to a DESIGN.md that is no part of the repository)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
REPO_PATH = re.compile(r"`((?:tests|bench_gate|sim_instruments|bench|docs)/[\w./-]+\.\w+)")
PAGE_NAME = re.compile(r"(?<![\w/.-])([\w-]+\.md)\b")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings."""
    found = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"#+ (.*)", line)
        if heading:
            found.add(re.sub(r"[^\w\- ]", "", heading[1].strip().lower()).replace(" ", "-"))
    return found


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_what_a_page_points_to_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    missing = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("@"):  # a URL; a (@1) list
            continue
        path, _, anchor = target.partition("#")
        linked = page.parent / path if path else page
        if not linked.exists() or (anchor and anchor not in anchors(linked)):
            missing.append(target)
    missing += [p for p in REPO_PATH.findall(text) if not (ROOT / p).exists()]
    missing += [name for name in PAGE_NAME.findall(text)
                if not (ROOT / name).exists() and not (ROOT / "docs" / name).exists()]
    assert not missing, f"{page.name} points to what the repository does not have: {missing}"
