"""The separator attack through the HTTP door where it was found: the message is refused
with its SCPI error, nothing is held, and the simulator's own port shows nothing changed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._http_bench import Bench, start_bench


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("separators"))


@pytest.mark.parametrize(("command", "code"), [
    ('DISP:TEXT "a;VOLT 20.0,(@2);OUTP 1,(@2);X"', -151),
    ("DISP:TEXT #0x;CURR 4.5,(@1);OUTP 1,(@1)", -161),
    ("DISP:TEXT 'a;:OUTP ON,(@3)'", -151),
])
def test_a_separator_in_data_is_refused_at_the_door(bench: Bench, command: str,
                                                    code: int) -> None:
    with bench.http("bot") as h:
        run = h.post("/v1/runs", json={"kind": "script"}).json()["id"]
        r = h.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu", "command": command})
        assert r.status_code == 422, r.text
        assert r.json()["scpiCode"] == code
        assert h.get(f"/v1/runs/{run}/takeover").json() == []
    for ch in (1, 2, 3):
        assert bench.psu(f"OUTP? (@{ch})") == "0"
    assert float(bench.psu("VOLT? (@2)")) == 0 and float(bench.psu("CURR? (@1)")) == 1
