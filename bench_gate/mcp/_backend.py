"""The one small interface the MCP tools call, for one requester.

Two implementations: :class:`~bench_gate.mcp._http.HttpBench` (over the HTTP API, for
``bench-gate mcp --url``) and :class:`~bench_gate.mcp._core.CoreBench` (in-process on the
gateway core, for the endpoint mounted on the main server). Both return the tool result
models and raise :class:`ToolFailure` for anything the agent should read as a tool error.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..texts import redact
from ._results import Answers, InstrumentInfo, InstrumentState, WriteOutcome

__all__ = ["Bench", "ToolFailure"]


class ToolFailure(Exception):
    """A clean tool error: its kind, the reason, and the SCPI error number if any. Its
    words never carry a token, whatever argument brought one (``texts.redact``)."""

    def __init__(self, error: str, reason: str, scpi_code: int | None = None,
                 hint: str | None = None) -> None:
        self.error = error
        self.reason = redact(reason) or reason
        self.scpi_code = scpi_code
        self.hint = redact(hint)
        super().__init__(self.reason)


class Bench(Protocol):
    """What the tools need from the gateway, acting for one requester."""

    async def create_run(self, goal: str) -> str:
        """A run of kind ``agent`` with its goal; returns its id."""
        ...
    async def close_run(self, run_id: str, reason: str | None = None) -> None:
        """Close the run; ``reason`` (default: closed by whom) goes into each outcome."""
        ...
    async def heartbeat(self, run_id: str) -> None:
        """This client is still there (a run with a heartbeat term closes without it)."""
        ...
    async def instruments(self) -> list[InstrumentInfo]: ...
    async def state(self, instrument: str) -> InstrumentState: ...
    async def submit(self, run_id: str, instrument: str, command: str, *,
                     rationale: str | None = None, confidence: float | None = None,
                     step_id: str | None = None) -> WriteOutcome:
        """A read's answer (status ``executed``), a held write, or a ToolFailure (refused)."""
        ...
    async def wait(self, takeover_id: str, timeout: float) -> WriteOutcome: ...
    async def request_plan(self, run_id: str, scope: dict[str, Any],
                           rationale: str | None) -> WriteOutcome: ...
    async def ask(self, run_id: str, questions: list[dict[str, Any]],
                  timeout_minutes: int | None) -> Answers: ...
    async def wait_answer(self, question_id: str, timeout: float) -> Answers: ...
    async def emergency_stop(self, instrument: str | None) -> dict[str, Any]:
        """Every channel's safe action at once; needs no approval."""
        ...
