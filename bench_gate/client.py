"""A small client of the HTTP API for scripts, agents and operators.

>>> bench = Client("http://127.0.0.1:8000", token)
>>> bench.run(kind="script", goal="characterize the DUT")
>>> bench.query("psu", "MEAS:VOLT? (@1)")
'+0.00000000E+00'
>>> outcome = bench.write("psu", "VOLT 5,(@1)", wait=300)
>>> outcome.status, outcome.receipt or outcome.notes
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from .doorway import UNDECIDED, follow_remote

__all__ = ["ApiError", "Client", "Outcome", "ProposalChangedError", "segment"]


def segment(value: object) -> str:
    """``value`` as exactly one segment of an API path: every reserved character escaped,
    dots too, so an id someone typed is never a path (``..``), a query (``?``) or a
    fragment (``#``): ``/v1/takeover/../runs`` would be ``GET /v1/runs``."""
    return quote(str(value), safe="").replace(".", "%2E")

MAX_WAIT_PER_CALL = 60.0


class ApiError(Exception):
    """The server answered with a problem (or could not be reached)."""

    def __init__(self, status: int, reason: str, problem: dict[str, Any] | None = None
                 ) -> None:
        self.status = status
        self.reason = reason
        self.problem = problem or {}
        self.scpi_code: int | None = self.problem.get("scpiCode")
        super().__init__(f"{status}: {reason}" if status else reason)


class ProposalChangedError(ApiError):
    """A grant or denial named a proposal that is no longer the request's (409): someone
    edited it, or it was proposed again. Nothing was decided. ``current`` is the request as
    it stands, with its handoff; show it, then decide again naming ``current_hash``."""

    def __init__(self, reason: str, problem: dict[str, Any]) -> None:
        super().__init__(409, reason, problem)
        self.seen_hash: str | None = problem.get("seenProposalHash")
        self.current_hash: str | None = problem.get("currentProposalHash")
        self.current: dict[str, Any] = problem.get("current") or {}


@dataclass
class Outcome:
    """How a write ended: executed (with receipt), denied (with notes), expired, stale..."""

    status: str
    request_id: str | None = None
    response: str | None = None
    receipt: dict[str, Any] | None = None
    notes: str | None = None
    message: str | None = None
    takeover: dict[str, Any] = field(default_factory=dict)

    @property
    def executed(self) -> bool:
        return self.status == "executed"

    @classmethod
    def from_takeover(cls, tk: dict[str, Any], response: str | None = None) -> Outcome:
        return cls(status=tk["status"], request_id=tk["id"], response=response,
                   receipt=tk.get("receipt"), notes=tk.get("notes"),
                   message=tk.get("outcome"), takeover=tk)


class Client:
    def __init__(self, url: str = "http://127.0.0.1:8000", token: str | None = None, *,
                 timeout: float = 90.0, transport: httpx.BaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers,
                                      timeout=timeout, transport=transport)
        except httpx.InvalidURL as exc:  # a bad port, an unclosed [: said, never a traceback
            raise ApiError(0, f"{url!r} is not a server URL (http://HOST:PORT): {exc}"
                           ) from exc
        self.run_id: str | None = None

    # --------------------------------------------------------------- plumbing
    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._body(self._send(method, path, **kwargs))

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            r = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(0, f"cannot reach {self._http.base_url}: {exc}") from exc
        if r.status_code >= 400:
            try:
                body = r.json()
                reason = str(body.get("reason") or body.get("detail") or r.reason_phrase)
            except ValueError:
                body, reason = None, r.text or r.reason_phrase
            if r.status_code == 409 and isinstance(body, dict) \
                    and "currentProposalHash" in body:
                raise ProposalChangedError(reason, body)
            raise ApiError(r.status_code, reason, body)
        return r

    @staticmethod
    def _body(r: httpx.Response) -> Any:
        if r.headers.get("content-type", "").startswith("application/json"):
            return r.json()
        return r.text

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, run_id: str | None) -> str:
        rid = run_id or self.run_id
        if rid is None:
            raise ApiError(0, "no run: call run() first or pass run_id")
        return segment(rid)

    # --------------------------------------------------------------- requesters
    def run(self, kind: str = "script", goal: str | None = None, *,
            heartbeat_seconds: int | None = None) -> dict[str, Any]:
        """Start a run; later calls use it unless given another ``run_id``. With
        ``heartbeat_seconds`` the run closes if this client is silent that long: submit,
        or call :meth:`heartbeat`, more often than that."""
        body: dict[str, Any] = {"kind": kind, "goal": goal}
        if heartbeat_seconds is not None:
            body["heartbeatSeconds"] = heartbeat_seconds
        run: dict[str, Any] = self.request("POST", "/v1/runs", json=body)
        self.run_id = run["id"]
        return run

    def heartbeat(self, run_id: str | None = None) -> dict[str, Any]:
        """This client is still there: the run's term and leases go on (ApiError 409 if
        the run is closed)."""
        beat: dict[str, Any] = self.request("POST", f"/v1/runs/{self._run(run_id)}/heartbeat")
        return beat

    def runs(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", "/v1/runs")
        return result

    def journal(self, run_id: str | None = None) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        after = 0
        while True:
            page = self.request("GET", f"/v1/runs/{self._run(run_id)}/journal",
                                params={"after": after, "limit": 1000})
            events.extend(page["events"])
            if page["next"] is None:
                return events
            after = page["next"]

    def submit(self, instrument: str, command: str, *, run_id: str | None = None,
               wait: float = 0, idempotency_key: str | None = None,
               **extra: Any) -> dict[str, Any]:
        """``POST /v1/runs/{id}/scpi`` as is; raises ApiError on a refusal (422)."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        params = {"wait": min(wait, MAX_WAIT_PER_CALL)} if wait else {}
        body = {"instrument": instrument, "command": command,
                **{k: v for k, v in extra.items() if v is not None}}
        result: dict[str, Any] = self.request("POST", f"/v1/runs/{self._run(run_id)}/scpi",
                                              json=body, params=params, headers=headers)
        return result

    def query(self, instrument: str, command: str, *, run_id: str | None = None) -> str:
        """A read: its answer. A command that turns out to be a write raises ApiError."""
        result = self.submit(instrument, command, run_id=run_id)
        if result["status"] != "executed" or result.get("takeover"):
            raise ApiError(202, f"{command!r} is not read-only: it is held as "
                                f"{result['takeover']['id']}")
        return str(result.get("response") or "")

    def write(self, instrument: str, command: str, *, wait: float = 0,
              run_id: str | None = None, rationale: str | None = None,
              confidence: float | None = None, step_id: str | None = None,
              idempotency_key: str | None = None) -> Outcome:
        """Submit a write and wait up to ``wait`` seconds for its decision. A confidence
        that is not a number from 0 to 1 (NaN, inf, 95) raises ValueError; nothing is sent."""
        if confidence is not None and (
                isinstance(confidence, bool) or not isinstance(confidence, int | float)
                or not math.isfinite(confidence) or not 0 <= confidence <= 1):
            raise ValueError(f"confidence must be a number from 0 to 1, not {confidence!r}; "
                             "nothing was sent")
        deadline = time.monotonic() + wait
        result = self.submit(instrument, command, run_id=run_id, wait=wait,
                             idempotency_key=idempotency_key, rationale=rationale,
                             confidence=confidence, stepId=step_id)
        tk = result.get("takeover")
        if tk is None:
            return Outcome(status=result["status"], response=result.get("response"))
        outcome = Outcome.from_takeover(tk, result.get("response"))
        remaining = deadline - time.monotonic()
        if outcome.status in UNDECIDED and remaining > 0:
            outcome = self.wait(tk["id"], remaining)
        return outcome

    def get(self, request_id: str, *, wait: float = 0) -> dict[str, Any]:
        """One request with its handoff; ``request_id`` may be a unique prefix of an id (the
        answer's ``id`` is the full one). ``wait`` long-polls for a decision."""
        params = {"wait": min(wait, MAX_WAIT_PER_CALL)} if wait > 0 else {}
        result: dict[str, Any] = self.request("GET", f"/v1/takeover/{segment(request_id)}",
                                              params=params)
        return result

    def wait(self, request_id: str, timeout: float) -> Outcome:
        """Long-poll a request until it is decided or ``timeout`` seconds pass, following a
        stale request to the fresh one that replaced it."""
        tk = follow_remote(lambda rid, wait: self.get(rid, wait=wait), request_id, timeout,
                           poll=MAX_WAIT_PER_CALL)
        answer = (tk.get("receipt") or {}).get("detail") or None
        return Outcome.from_takeover(tk, answer)

    def request_plan(self, instrument: str, channels: list[int],
                     voltage: tuple[float, float], current_max: float, *, max_writes: int,
                     max_step: float | None = None, output_enable: bool = False,
                     timeout_minutes: int = 60, rationale: str | None = None,
                     run_id: str | None = None, wait: float = 0) -> dict[str, Any]:
        """Ask for a standing plan (``docs/plans.md``); returns ``{status, takeover, plan}``.

        The request is decided like a held write; ``wait`` long-polls up to 60 s for it.
        """
        body: dict[str, Any] = {
            "instrument": instrument, "channels": list(channels), "voltage": list(voltage),
            "currentMax": current_max, "outputEnable": output_enable,
            "maxWrites": max_writes, "timeoutMinutes": timeout_minutes}
        if max_step is not None:
            body["maxStep"] = max_step
        if rationale is not None:
            body["rationale"] = rationale
        params = {"wait": min(wait, MAX_WAIT_PER_CALL)} if wait else {}
        result: dict[str, Any] = self.request("POST", f"/v1/runs/{self._run(run_id)}/plans",
                                              json=body, params=params)
        return result

    def plans(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """The run's plans, oldest first, each with ``status`` and ``writesLeft``."""
        result: list[dict[str, Any]] = self.request("GET",
                                                    f"/v1/runs/{self._run(run_id)}/plans")
        return result

    def feedback(self, step_id: str, score: int, notes: str = "", *,
                 run_id: str | None = None) -> dict[str, Any]:
        """Score an unattended step 1 to 5 (2 or less counts as regret)."""
        result: dict[str, Any] = self.request(
            "POST", f"/v1/runs/{self._run(run_id)}/feedback",
            json={"stepId": step_id, "score": score, "notes": notes})
        return result

    # --------------------------------------------------------------- operators
    def pending(self, instrument: str | None = None) -> list[dict[str, Any]]:
        """The first page (100) of requests waiting for a decision, newest first."""
        return self.pending_page(instrument)[0]

    def pending_page(self, instrument: str | None = None, *, sort: str = "newest",
                     limit: int = 100, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """One page of the requests waiting for a decision (``sort``: ``newest`` or
        ``expiry``, soonest first), and how many wait in all."""
        params: dict[str, str | int] = {"status": "pending", "sort": sort, "limit": limit,
                                        "offset": offset}
        if instrument:
            params["instrument"] = instrument
        r = self._send("GET", "/v1/takeover", params=params)
        page: list[dict[str, Any]] = self._body(r)
        return page, int(r.headers.get("X-Total-Count", len(page)))

    def close_run(self, run_id: str | None = None) -> dict[str, Any]:
        """Close the run: its undecided requests are cancelled, and it no longer counts
        against the requester's ``limits.open_runs``."""
        result: dict[str, Any] = self.request("POST", f"/v1/runs/{self._run(run_id)}/close")
        return result

    def grant(self, request_id: str, approve: list[str], *, proposal_hash: str,
              notes: str = "", edits: dict[str, str] | None = None) -> dict[str, Any]:
        """Give approvals of exactly one proposal: ``proposal_hash``, the ``proposalHash``
        of the request as its approver was shown it (``get()``). There is no default: a
        hash fetched at the moment of deciding names a proposal nobody read (another
        operator's edit since). Returns ``{request, missing, message}``: the request with
        the approvals it now holds. A proposal that is no longer current raises
        ProposalChangedError (with the current one) and approves nothing."""
        tk = self.get(request_id)
        body: dict[str, Any] = {"approve": approve, "notes": notes,
                                "proposalHash": proposal_hash}
        if edits:
            body["edits"] = edits
        path = f"/v1/runs/{segment(tk['runId'])}/takeover/{segment(tk['id'])}"
        result: dict[str, Any] = self.request("POST", f"{path}/grant", json=body)
        return result

    def deny(self, request_id: str, notes: str, *, proposal_hash: str) -> dict[str, Any]:
        """Deny exactly one proposal (``proposal_hash`` as in ``grant``); returns the request.
        A proposal that is no longer current raises ProposalChangedError."""
        tk = self.get(request_id)
        body = {"notes": notes, "proposalHash": proposal_hash}
        path = f"/v1/runs/{segment(tk['runId'])}/takeover/{segment(tk['id'])}"
        result: dict[str, Any] = self.request("POST", f"{path}/deny", json=body)
        return result

    def take_over(self, run_id: str, reason: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "POST", f"/v1/runs/{segment(run_id)}/takeover/request", json={"reason": reason})
        return result

    def emergency_stop(self, instrument: str | None = None) -> dict[str, Any]:
        """Every channel's safe action at once (one instrument, or the whole bench);
        cancels what waits; refuses writes until an operator clears it. No approval."""
        body = {"instrument": instrument} if instrument else {}
        result: dict[str, Any] = self.request("POST", "/v1/bench/stop", json=body)
        return result

    def clear_stop(self, instrument: str | None = None) -> list[str]:
        body = {"instrument": instrument} if instrument else {}
        result: dict[str, Any] = self.request("POST", "/v1/bench/stop/clear", json=body)
        return list(result["cleared"])

    def release(self, run_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", f"/v1/runs/{segment(run_id)}/release")
        return result

    def revoke_plan(self, run_id: str, plan_id: str) -> dict[str, Any]:
        """End a plan now (operators); the run's next write is held."""
        result: dict[str, Any] = self.request(
            "POST", f"/v1/runs/{segment(run_id)}/plans/{segment(plan_id)}/revoke")
        return result
