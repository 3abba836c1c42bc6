"""Headless Chromium for the console's tests: Playwright's Python API driving Debian's
/usr/bin/chromium, never a downloaded browser. Without chromium (or playwright) the browser
tests skip, except under CI (the CI environment variable is set), where a skip is a failure.
The ``browser`` fixture (tests/conftest.py) launches it once per test module."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ._http_bench import Bench

CHROMIUM = Path(os.environ.get("BENCH_GATE_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(os.environ.get("BENCH_GATE_ARTIFACTS", "test-artifacts"))
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 15_000
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


def unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"browser tests cannot run under CI: {reason}")
    pytest.skip(reason)


def launch() -> Iterator[Any]:
    """One headless Chromium for the duration of the generator."""
    if not CHROMIUM.exists():
        unavailable(f"no chromium at {CHROMIUM}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def sign_in(browser: Any, bench: Bench, who: str = "olga",
            viewport: dict[str, int] | None = None) -> Any:
    """A new browser context signed in as ``who`` through the sign-in form; its page."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    view = viewport or DESKTOP
    context = browser.new_context(viewport=view, is_mobile=view["width"] < 600)
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    pg.goto(bench.url + "/")
    assert "/login" in pg.url
    pg.fill("input[name=token]", bench.tokens[who])
    pg.click("button[type=submit]")
    pg.wait_for_url(bench.url + "/")
    assert pg.locator("form.who").inner_text().startswith(who)
    return pg


def shot(pg: Any, name: str, full: bool = True) -> None:
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full)
