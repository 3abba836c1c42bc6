"""One JSON vocabulary (issue 19): every key the HTTP API sends is camelCase (the handoff
and the receipt too), every time is RFC 3339 with ``Z``, the requester's words are called
``rationale``; keys that are data (``ch1.voltage``, an instrument's name) stay as they are.
Journal ``data`` is the exception: it is shown verbatim, because its hash covers it."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench_gate.wire import DATA_MAPS, camel, rfc3339, wire

from ..._http_bench import Bench, shown_hash, start_bench

NAME = re.compile(r"[a-z][a-zA-Z0-9]*")
ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
#: Maps keyed by data, in wire spelling.
DATA = {camel(k) for k in DATA_MAPS}


def bad_keys(value: Any, where: str = "", data: bool = False, deep: bool = False
             ) -> Iterator[str]:
    """Keys that are names but not camelCase, and times not in UTC ``Z``; a data map's
    keys are data (``channels`` and ``limits``: two levels of them)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if data:
                yield from bad_keys(v, f"{where}.{k}", data=deep)
                continue
            if not NAME.fullmatch(str(k)):
                yield f"{where}.{k}"
            yield from bad_keys(v, f"{where}.{k}", data=k in DATA,
                                deep=k in ("channels", "limits"))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from bad_keys(v, f"{where}[{i}]")
    elif isinstance(value, str) and ISO_TIME.match(value) and not value.endswith("Z"):
        yield f"{where}={value}"


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("camel"))


def test_every_response_model_is_camel_case(bench: Bench) -> None:
    with bench.http(None) as h:
        spec = h.get("/openapi.json").json()
    wrong = [f"{name}.{prop}" for name, schema in spec["components"]["schemas"].items()
             for prop in schema.get("properties", {})
             if not NAME.fullmatch(prop) and not name.startswith(("HTTPValidation",
                                                                 "ValidationError"))]
    assert not wrong


def test_every_dynamic_body_is_camel_case_with_utc_times(bench: Bench) -> None:
    """The bodies built from the core's records: a request's handoff and receipt, a stale
    one's diff, an energize's setpoint, the journal's envelope, the stop, live state,
    leases, tokens, feedback, and the event stream."""
    seen: dict[str, Any] = {}
    events: list[str] = []

    def listen() -> None:
        with bench.http("olga") as h, h.stream("GET", "/v1/events") as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                if len(events) >= 3:
                    return

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    with bench.http("bot") as bot, bench.http("olga") as olga, bench.http("ada") as ada:
        run = bot.post("/v1/runs", json={"kind": "script", "goal": "camel"}).json()["id"]
        held = bot.post(f"/v1/runs/{run}/scpi", json={
            "instrument": "psu", "command": "VOLT 4.5,(@1)", "rationale": "the DUT runs at 4.5 V",
            "stepId": "s1"}).json()
        tk = held["takeover"]["id"]
        seen["held"] = held
        grant = olga.post(f"/v1/runs/{run}/takeover/{tk}/grant", json={
            "approve": ["setpoint"], "proposalHash": shown_hash(olga, tk)})
        assert grant.status_code == 200, grant.text
        seen["granted"] = grant.json()
        seen["executed"] = olga.get(f"/v1/takeover/{tk}").json()
        on = bot.post(f"/v1/runs/{run}/scpi", json={"instrument": "psu",
                                                    "command": "OUTP ON,(@1)"}).json()
        seen["energize"] = on
        seen["state"] = bot.get("/v1/instruments/psu/state").json()
        seen["journal"] = bot.get(f"/v1/runs/{run}/journal").json()
        seen["queue"] = olga.get("/v1/takeover").json()
        seen["runs"] = bot.get("/v1/runs").json()
        seen["heartbeat"] = bot.post(f"/v1/runs/{run}/heartbeat").json()
        seen["leases"] = olga.get("/v1/bench/leases").json()
        seen["tokens"] = ada.get("/v1/tokens").json()
        seen["feedback"] = olga.post(f"/v1/runs/{run}/feedback",
                                     json={"stepId": "s1", "score": 4}).json()
        seen["stop"] = bot.post("/v1/bench/stop", json={"instrument": "psu"}).json()
        seen["stopped"] = bot.get("/v1/bench/stop").json()
        olga.post("/v1/bench/stop/clear", json={"instrument": "psu"})
    listener.join(10)
    seen["events"] = [json.loads(e) for e in events]
    for name, body in seen.items():
        envelope = body
        if name == "journal":  # its data is verbatim (hashed); the envelope is camelCase
            envelope = [{k: v for k, v in e.items() if k != "data"} for e in body["events"]]
        assert not list(bad_keys(envelope)), (name, list(bad_keys(envelope)))
    handoff = seen["executed"]["handoff"]
    assert handoff["rationale"] == "the DUT runs at 4.5 V"
    assert handoff["proposalHash"] == seen["executed"]["proposalHash"]
    assert handoff["risk"]["envelope"][0]["marginPct"] == 25.0  # 1.5 V of a 6 V envelope
    assert "ch1.voltage" in handoff["snapshot"] and handoff["snapshotAt"].endswith("Z")
    assert seen["executed"]["receipt"]["startedAt"].endswith("Z")
    assert seen["stop"]["instruments"]["psu"]["readBack"]
    assert "setpointCover" in seen["energize"]["takeover"]["handoff"] or \
        "setpointNeeded" in seen["energize"]["takeover"]["handoff"]
    assert seen["events"] and all("runId" in e or e.get("type") == "run"
                                  for e in seen["events"] if e.get("type") == "request")


def test_a_sentence_s_times_are_written_with_z(bench: Bench) -> None:
    """An expired request's outcome names its expiry: in RFC 3339 with Z, as every time."""
    with bench.http("bot") as bot:
        run = bot.post("/v1/runs", json={"kind": "script"}).json()["id"]
        tk = bot.post(f"/v1/runs/{run}/scpi", json={
            "instrument": "psu", "command": "VOLT 0.7,(@2)"}).json()["takeover"]["id"]
        bench.clock.advance(minutes=31)
        out = bot.get(f"/v1/takeover/{tk}", params={"wait": 20}).json()  # the sweeper
    assert out["status"] == "expired", out
    assert "+00:00" not in out["outcome"] and re.search(r"\d\d:\d\d:\d\d(\.\d+)?Z",
                                                          out["outcome"]), out["outcome"]


# --------------------------------------------------------------------------- wire()
snake = st.from_regex(r"[a-z][a-z0-9]{0,5}(_[a-z0-9]{1,5}){0,3}", fullmatch=True)
leaf = st.one_of(st.none(), st.integers(), st.text(max_size=8),
                 st.datetimes(timezones=st.just(UTC)))
records = st.recursive(leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(snake, inner, max_size=4)), max_leaves=20)


@given(records)
def test_wire_names_every_key_in_camel_case(record: Any) -> None:
    out = wire(record)
    assert not list(bad_keys(out))
    assert wire(out) == out  # once is enough: wire JSON stays as it is


@given(st.dictionaries(st.from_regex(r"ch[1-3]\.[a-z]+(_[a-z]+)?", fullmatch=True),
                       st.text(max_size=5), max_size=4))
def test_data_keys_are_kept(snapshot: dict[str, str]) -> None:
    assert wire({"snapshot": snapshot, "stale_diff": snapshot}) == {
        "snapshot": snapshot, "staleDiff": snapshot}


@given(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)),
       st.integers(min_value=-12, max_value=12))
def test_times_are_rfc3339_utc_with_z(at: datetime, hours: int) -> None:
    aware = at.replace(tzinfo=timezone(timedelta(hours=hours)))
    text = rfc3339(aware)
    assert text.endswith("Z") and "+" not in text
    assert datetime.fromisoformat(text) == aware
