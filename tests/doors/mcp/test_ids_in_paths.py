"""An id an agent (or a person at the CLI) gives is one path segment of the API, never a
path: ``bench-gate mcp --url`` put ``wait_for_decision(takeover_id="../runs")`` into
``/v1/takeover/../runs``, which the HTTP client resolved to ``GET /v1/runs``: the tool
crashed on the run list it got back ("Error executing tool", a traceback in the log), and
``tk-1?wait=600&x=`` became a query string. Any GET of the API an id could reach that way."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench_gate.client import ApiError, Client

from ..._http_bench import Bench, start_bench
from .test_mcp import SESSIONS, call, text

ODD_IDS = ["../runs", "..", ".", "tk-1?wait=600&x=", "tk-1#frag", "a/b", "%2e%2e", "tk 1"]


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("mcp-ids"))


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_an_odd_id_is_a_clean_not_found(bench: Bench, transport: str) -> None:
    async with SESSIONS[transport](bench) as client:
        await call(client, "set_goal", goal="odd ids")
        for odd in ODD_IDS:
            for tool, arg in (("wait_for_decision", "takeover_id"),
                              ("wait_for_answer", "question_id")):
                r = await call(client, tool, **{arg: odd, "timeout_s": 0})
                assert r.is_error, (tool, odd, r)
                assert r.structured_content is not None, (tool, odd, text(r))
                assert r.structured_content["error"] == "not_found", (tool, odd, text(r))


def test_the_client_sends_an_id_as_one_segment(bench: Bench) -> None:
    with Client(bench.url, bench.tokens["olga"]) as c:
        for odd in ODD_IDS:
            with pytest.raises(ApiError) as missing:
                c.get(odd)
            assert missing.value.status == 404, (odd, missing.value)
