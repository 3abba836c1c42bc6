"""The console cannot be framed (issue 15): every console response sends
``X-Frame-Options: DENY`` and ``Content-Security-Policy: frame-ancestors 'none'``, and a page
on another port of 127.0.0.1 (the same site, so SameSite cookies do not help) that frames the
console, in real headless Chromium, shows nothing from it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import httpx
import pytest

from ..._browser import sign_in
from ..._http_bench import Bench, start_bench


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("console-frames"))


class Framer(BaseHTTPRequestHandler):
    """The other site: one page that frames the console."""

    target: ClassVar[str] = ""

    def do_GET(self) -> None:
        page = (f"<!doctype html><title>framer</title><h1>framer</h1>"
                f"<iframe id='victim' src='{Framer.target}' width='900' height='600'>"
                f"</iframe>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def framer() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Framer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def _guarded(r: httpx.Response) -> None:
    assert r.headers.get("x-frame-options") == "DENY", (r.request.url, r.headers)
    assert "frame-ancestors 'none'" in r.headers.get("content-security-policy", ""), \
        (r.request.url, r.headers)


def test_every_console_response_forbids_framing(bench: Bench) -> None:
    with httpx.Client(base_url=bench.url, timeout=10) as h:
        for path in ("/login", "/", "/fragments/queue", "/static/console.js",
                     "/requests/tk-nope", "/no-such-page"):
            _guarded(h.get(path))
        signed = h.post("/login", data={"token": bench.tokens["olga"], "csrf": "x"})
        _guarded(signed)  # a refusal (no CSRF cookie) is a console response too
    with bench.http("olga") as h:
        cookie_page = h.get("/login")
        _guarded(cookie_page)


@pytest.mark.parametrize("path", ["/login", "/"])
def test_a_page_on_another_port_cannot_frame_the_console(bench: Bench, framer: str,
                                                         browser: Any, path: str) -> None:
    Framer.target = bench.url + path
    # Signed in first, so the frame would carry Olga's session if it were rendered.
    pg = sign_in(browser, bench)
    context = pg.context
    try:

        said: list[str] = []
        pg.on("console", lambda m: said.append(m.text))
        pg.goto(framer)
        assert pg.locator("h1").inner_text() == "framer"
        pg.wait_for_timeout(1000)  # let the frame load (or be refused)
        frames = [f for f in pg.frames if f is not pg.main_frame]
        assert len(frames) == 1
        inside = frames[0]
        assert not inside.url.startswith(bench.url), inside.url
        assert inside.locator("input[name=token]").count() == 0
        assert inside.locator("form.who").count() == 0
        assert inside.locator("body").inner_text(timeout=2000).find("bench-gate") == -1
        assert any("frame-ancestors" in m or "X-Frame-Options" in m for m in said), said
    finally:
        context.close()
