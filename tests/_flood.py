"""One requester's flood of held writes, made cheaply: one write held through the HTTP API,
then copies of it filed straight into the serving gateway's store, each made a millisecond
after the one before and expiring its timeout after that (as a real flood's would)."""

from __future__ import annotations

from datetime import timedelta

from ._http_bench import Bench


def hold(bench: Bench, who: str, command: str, goal: str) -> tuple[str, str]:
    """A run of ``who`` and one held write of it, through the HTTP API: (run, request)."""
    with bench.http(who) as h:
        run = h.post("/v1/runs", json={"kind": "script", "goal": goal})
        assert run.status_code == 201, run.text
        r = h.post(f"/v1/runs/{run.json()['id']}/scpi",
                   json={"instrument": "psu", "command": command})
        assert r.status_code == 202, r.text
        return str(run.json()["id"]), str(r.json()["takeover"]["id"])


def flood(bench: Bench, who: str, count: int, command: str = "VOLT 1,(@1)") -> str:
    """``count`` pending requests of one run of ``who``; returns the run's id. The bench
    needs ``limits.pending_requests`` above ``count``."""
    run_id, tk = hold(bench, who, command, "flood the queue")
    assert bench.server.running is not None
    store = bench.server.running.gateway.store
    template = store.get_request(tk)
    assert template is not None
    for i in range(1, count):
        at = template.created_at + timedelta(milliseconds=i)
        store.create_request(template.model_copy(update={
            "id": f"{tk}-{i:05}", "created_at": at, "idempotency_key": None,
            "expires_at": at + timedelta(minutes=template.timeout_minutes)}), [])
    return run_id
