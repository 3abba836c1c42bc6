"""``bench-gate show`` prints what the gateway added to a write or kept back, and why
(docs/reliability.md section 7): ``*CLS`` is answered by the gateway, never sent."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..._http_bench import Bench, shown_hash, start_bench
from .test_http_cli import cli, held


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("cli7"))


def test_show_says_what_the_gateway_kept_back(bench: Bench) -> None:
    run, tk = held(bench, "*CLS;VOLT 2.5,(@2)")
    with bench.http("olga") as h:
        r = h.post(f"/v1/runs/{run}/takeover/{tk}/grant",
                   json={"approve": ["setpoint"], "proposalHash": shown_hash(h, tk)})
        assert r.status_code == 200, r.text
    out = cli(bench, "olga", "show", tk)
    assert out.returncode == 0, out.stderr
    sent = next(line for line in out.stdout.splitlines() if line.strip().startswith("sent"))
    assert sent.split(None, 1)[1] == "VOLT 2.5,(@2)", out.stdout
    assert "*CLS: not sent: answered by the gateway" in out.stdout, out.stdout
