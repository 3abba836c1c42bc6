"""The MCP server: the tools, one run per MCP session, on any :class:`Bench`.

Each tool resolves its session (an :class:`AgentSession`: the bench it acts through and
the session's run), calls the bench, and returns a structured result with a short text
summary; a :class:`ToolFailure` becomes a tool error (``isError``) carrying a
:class:`Problem`.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Annotated, Any, ParamSpec

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from ..auth import refuse_token
from ..confidence import stated_confidence
from ..errors import InvalidInput
from ..scpi import ScpiError, classify, is_read_only
from ..wire import wire
from ._backend import Bench, ToolFailure
from ._failures import GateServer, problem
from ._results import (
    Answers,
    GoalSet,
    Instruments,
    InstrumentState,
    QueryResult,
    Stopped,
    WriteOutcome,
)

__all__ = ["MAX_WAIT_SECONDS", "AgentSession", "SessionFor", "build_server"]

MAX_WAIT_SECONDS = 600.0
INSTRUCTIONS = """\
bench-gate puts a person between you and the lab bench. Start with set_goal (one goal per
session: the operator sees it beside every request). Reads (scpi_query, get_state) run at
once. A write (scpi_write) runs only after an operator approves it: it comes back pending
with a takeover id; call wait_for_decision to learn the outcome. A denial carries the
operator's notes: read them and adjust. For a series of writes ask for a standing plan
(request_plan). When unsure, ask the operator (ask_operator) instead of guessing."""

READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                       open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                        open_world_hint=False)
ASK = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                      open_world_hint=False)
#: The emergency stop: it changes state, but only ever towards safe.
STOP = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                       open_world_hint=False)
WAIT = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                       open_world_hint=False)


class AgentSession:
    """One MCP session: the bench it acts through and its run (made by ``set_goal``)."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.run_id: str | None = None
        self.goal: str | None = None
        self._lock = anyio.Lock()
        self._profiles: dict[str, str] | None = None
        self._closed = False

    def run(self) -> str:
        if self.run_id is None:
            raise ToolFailure("no_goal", "set the run's goal first with set_goal(goal): the "
                              "operator sees it beside every request of this session",
                              hint="set_goal")
        return self.run_id

    async def set_goal(self, goal: str) -> str:
        async with self._lock:
            if self.run_id is None:
                self.run_id = await self.bench.create_run(goal)
                self.goal = goal
            elif goal != self.goal:
                raise ToolFailure("conflict", f"this session's goal is already {self.goal!r} "
                                  f"(run {self.run_id}); one goal per session: start a new "
                                  "MCP session for a new goal")
            return self.run_id

    async def profile(self, instrument: str) -> str:
        if self._profiles is None or instrument not in self._profiles:
            self._profiles = {i.name: i.profile for i in await self.bench.instruments()}
        if instrument not in self._profiles:
            raise ToolFailure("not_found", f"no instrument {instrument!r}; this bench has "
                              f"{', '.join(self._profiles) or 'none'}", hint="list_instruments")
        return self._profiles[instrument]

    async def heartbeat(self) -> None:
        """Tell the gateway this session is still there (once its run exists)."""
        if self.run_id is not None and not self._closed:
            await self.bench.heartbeat(self.run_id)

    async def close(self, reason: str | None = None) -> None:
        """Close the session's run (once): its undecided requests are cancelled."""
        if self.run_id is not None and not self._closed:
            self._closed = True
            await self.bench.close_run(self.run_id, reason)


SessionFor = Callable[[Context], Awaitable[AgentSession]]
P = ParamSpec("P")


def _result(model: BaseModel, text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content=wire(model.model_dump(mode="json", by_alias=True)))


def _guard(fn: Callable[P, Awaitable[CallToolResult]]) -> Callable[P, Awaitable[CallToolResult]]:
    @functools.wraps(fn)
    async def tool(*args: P.args, **kwargs: P.kwargs) -> CallToolResult:
        try:
            return await fn(*args, **kwargs)
        except ToolFailure as exc:
            return problem(exc)
    return tool


def write_summary(out: WriteOutcome) -> str:
    if out.status == "executed":
        sent = "; ".join((out.receipt or {}).get("sent") or [])
        answer = f" → {out.response}" if out.response else ""
        return f"executed{': ' + sent if sent else ''}{answer} (receipt attached)"
    if out.pending is not None:
        p = out.pending
        words = "; ".join(str(a.get("words") or a.get("canonical"))
                          for a in p.operator_sees.get("actions", []) if isinstance(a, dict))
        return (f"{out.status}: {out.takeover_id} waits for an operator "
                f"(needs {', '.join(p.approvals_missing) or 'execution'}; expires "
                f"{p.expires_at}). The operator sees: {words or '; '.join(p.commands)}. "
                f"Call wait_for_decision({out.takeover_id!r}, timeout_s) for the outcome.")
    if out.status == "denied":
        return f"denied: {out.notes or out.outcome}. Nothing was written; read why and adjust."
    return out.outcome or out.status


def answers_summary(a: Answers) -> str:
    if a.status == "open":
        return (f"{a.question_id}: waiting for the operator until {a.expires_at}; call "
                f"wait_for_answer({a.question_id!r}, timeout_s)")
    return a.outcome or a.status


class OptionArg(BaseModel):
    model_config = ConfigDict(extra="forbid")  # published: additionalProperties false

    label: str = Field(min_length=1, max_length=120)
    description: str = Field(default="", max_length=1000)


class QuestionArg(BaseModel):
    model_config = ConfigDict(extra="forbid")  # published: additionalProperties false

    text: str = Field(min_length=1, max_length=2000, description="the question")
    options: list[OptionArg] = Field(min_length=2, max_length=4)
    allow_free_text: bool = Field(default=False, description="the operator may write an "
                                  "answer of their own")


Instrument = Annotated[str, Field(min_length=1, max_length=64, description="an instrument "
                                  "name from list_instruments")]
Command = Annotated[str, Field(min_length=1, max_length=4096, description="one SCPI program "
                               "message")]
Seconds = Annotated[float, Field(ge=0, le=MAX_WAIT_SECONDS)]


def _free_text(rationale: str, *, confidence: bool = False, step_id: str | None = None
               ) -> None:
    """Checked in the tool, not as an argument validator, whose error would repeat the
    value: a rationale (or step id) never carries a token, and its ``Confidence:`` is 0..1
    (0..100 %)."""
    try:
        refuse_token(rationale, "rationale")
        refuse_token(step_id, "step_id")
        if confidence:
            stated_confidence(rationale)
    except InvalidInput as exc:
        raise ToolFailure("invalid_input", exc.message) from exc


def build_server(session_for: SessionFor, *, name: str = "bench-gate") -> MCPServer:
    """The MCP server; ``session_for(ctx)`` gives the calling session."""
    server: MCPServer = GateServer(name, instructions=INSTRUCTIONS, version="0.1.0",
                                  log_level="WARNING")

    @server.tool(annotations=ASK, title="Set the run's goal")
    @_guard
    async def set_goal(goal: Annotated[str, Field(min_length=1, max_length=2000)],
                       ctx: Context) -> Annotated[CallToolResult, GoalSet]:
        """Set this session's goal; it starts the session's run (kind agent). Call it first:
        queries, writes, plans and questions need it. One goal per session."""
        session = await session_for(ctx)
        run_id = await session.set_goal(goal)
        return _result(GoalSet(run_id=run_id, goal=goal, status="active"),
                       f"run {run_id}: goal set: {goal}")

    @server.tool(annotations=STOP, title="Emergency stop")
    @_guard
    async def emergency_stop(ctx: Context, instrument: Annotated[str | None, Field(
            default=None, max_length=64, description="one instrument, or every one")] = None
                             ) -> Annotated[CallToolResult, Stopped]:
        """Make the bench safe at once: every channel's output off, every pending request
        on it cancelled, every write refused until an operator clears the stop. Needs no
        approval; use it whenever something looks wrong."""
        session = await session_for(ctx)
        done = Stopped.model_validate(await session.bench.emergency_stop(instrument))
        # Only what was read back is said: an output that still reads on, or one that could
        # not be read or sent to, is named, never reported off.
        failed: dict[str, list[str]] = {
            name: [str(e) for e in r.get("errors") or []]
            for name, r in done.instruments.items() if r.get("errors")}
        outputs = ("outputs off" if not failed else "NOT every output is shown off: " + "; ".join(
            f"{name}: {'; '.join(errors)}" for name, errors in failed.items())
            + " (the gateway tries again every watch period until each reads off)")
        return _result(done, f"stopped {', '.join(done.instruments) or 'the bench'}: "
                             f"{outputs}; {len(done.cancelled)} request"
                             f"{'s' * (len(done.cancelled) != 1)} cancelled; an "
                             "operator must clear the stop")

    @server.tool(annotations=READ, title="List instruments")
    @_guard
    async def list_instruments(ctx: Context) -> Annotated[CallToolResult, Instruments]:
        """The bench's instruments: name, profile (model) and resource."""
        session = await session_for(ctx)
        rows = await session.bench.instruments()
        return _result(Instruments(instruments=rows), "; ".join(
            f"{i.name} ({i.profile})" for i in rows) or "no instruments")

    @server.tool(annotations=READ, title="Live state")
    @_guard
    async def get_state(instrument: Instrument, ctx: Context
                        ) -> Annotated[CallToolResult, InstrumentState]:
        """Every field of every channel (setpoints, output, measured values), read live."""
        session = await session_for(ctx)
        await session.profile(instrument)
        state = await session.bench.state(instrument)
        lines = [f"CH{ch}: " + ", ".join(f"{k}={v}" for k, v in fields.items())
                 for ch, fields in state.channels.items()]
        return _result(state, f"{instrument} ({state.idn}): " + " | ".join(lines))

    @server.tool(annotations=READ, title="SCPI query (reads only)")
    @_guard
    async def scpi_query(instrument: Instrument, command: Command, ctx: Context
                         ) -> Annotated[CallToolResult, QueryResult]:
        """Run a read-only SCPI query (e.g. ``MEAS:VOLT? (@1)``) and return its answer.
        Anything that changes the instrument is refused here: send it with scpi_write."""
        session = await session_for(ctx)
        run_id = session.run()
        profile = await session.profile(instrument)
        if not is_read_only(command, profile):
            try:
                c = classify(command, profile)
            except ScpiError as exc:
                raise ToolFailure("refused", exc.message, exc.code) from exc
            effects = ", ".join(sorted({u.effect.value for u in c.units
                                        if u.effect.value not in ("read", "select")}))
            raise ToolFailure(
                "not_read_only", f"{command!r} is not read-only on {instrument} ({effects}); "
                "scpi_query runs reads only. Send it with scpi_write(instrument, command, "
                "rationale): an operator approves it first", hint="scpi_write")
        out = await session.bench.submit(run_id, instrument, command)
        if out.status != "executed":  # never expected: a read-only message passes
            raise ToolFailure("held", f"the gateway held {command!r} as {out.takeover_id}",
                              hint="wait_for_decision")
        response = out.response or ""
        return _result(QueryResult(instrument=instrument, command=command, response=response,
                                   run_id=run_id), response)

    @server.tool(annotations=WRITE, title="SCPI write (waits for an operator)")
    @_guard
    async def scpi_write(
            instrument: Instrument, command: Command,
            rationale: Annotated[str, Field(min_length=1, max_length=4000,
                                            description="why: the operator reads it")],
            ctx: Context,
            confidence: Annotated[float | None, Field(ge=0, le=1, strict=True)] = None,
            step_id: Annotated[str | None, Field(max_length=200)] = None,
    ) -> Annotated[CallToolResult, WriteOutcome]:
        """Send a write. Returns at once: executed (with its receipt, e.g. inside a plan),
        pending (the takeover id, required approvals, expiry and what the operator sees),
        or an error with the limit it breaks. Follow a pending write with
        wait_for_decision."""
        _free_text(rationale, confidence=True, step_id=step_id)
        session = await session_for(ctx)
        run_id = session.run()
        await session.profile(instrument)
        out = await session.bench.submit(run_id, instrument, command, rationale=rationale,
                                          confidence=confidence, step_id=step_id)
        return _result(out, write_summary(out))

    @server.tool(annotations=WAIT, title="Wait for the operator's decision")
    @_guard
    async def wait_for_decision(
            takeover_id: Annotated[str, Field(min_length=1, max_length=200)], ctx: Context,
            timeout_s: Seconds = 60.0) -> Annotated[CallToolResult, WriteOutcome]:
        """Wait up to timeout_s seconds (at most 600) for a held write or plan: executed
        (receipt), denied (the operator's notes), expired, stale, failed; or still pending."""
        session = await session_for(ctx)
        session.run()
        out = await session.bench.wait(takeover_id, timeout_s)
        return _result(out, write_summary(out))

    @server.tool(annotations=ASK, title="Ask for a standing plan")
    @_guard
    async def request_plan(
            instrument: Instrument,
            channels: Annotated[list[int], Field(min_length=1, max_length=16)],
            voltage_min: Annotated[Decimal, Field(ge=0)],
            voltage_max: Annotated[Decimal, Field(ge=0)],
            current_max: Annotated[Decimal, Field(ge=0)],
            max_writes: Annotated[int, Field(ge=1, le=100_000)],
            rationale: Annotated[str, Field(min_length=1, max_length=4000)],
            ctx: Context,
            output_enable: bool = False,
            max_step: Annotated[Decimal | None, Field(gt=0)] = None,
            timeout_minutes: Annotated[int, Field(ge=1, le=1440)] = 60,
    ) -> Annotated[CallToolResult, WriteOutcome]:
        """Ask for a standing plan: once approved, writes inside this scope (channels,
        voltage range, current ceiling, largest step, output enable, number of writes,
        minutes) run without asking again. It comes back pending, like a write."""
        _free_text(rationale)
        session = await session_for(ctx)
        run_id = session.run()
        await session.profile(instrument)
        scope: dict[str, Any] = {
            "instrument": instrument, "channels": channels,
            "voltage": [voltage_min, voltage_max], "current_max": current_max,
            "max_step": max_step, "output_enable": output_enable, "max_writes": max_writes,
            "timeout_minutes": timeout_minutes}
        out = await session.bench.request_plan(run_id, scope, rationale)
        return _result(out, write_summary(out))

    @server.tool(annotations=ASK, title="Ask the operator")
    @_guard
    async def ask_operator(
            questions: Annotated[list[QuestionArg], Field(min_length=1, max_length=4)],
            ctx: Context,
            timeout_minutes: Annotated[int | None, Field(ge=1, le=1440)] = None,
            wait_s: Seconds = 60.0) -> Annotated[CallToolResult, Answers]:
        """Ask the operator 1 to 4 questions, each with 2 to 4 options (and free text if
        allowed). Waits up to wait_s seconds for the answers; if still open, call
        wait_for_answer. An expired question means no answer."""
        session = await session_for(ctx)
        run_id = session.run()
        asked = await session.bench.ask(run_id, [q.model_dump() for q in questions],
                                        timeout_minutes)
        if wait_s > 0:
            asked = await session.bench.wait_answer(asked.question_id, wait_s)
        return _result(asked, answers_summary(asked))

    @server.tool(annotations=WAIT, title="Wait for the operator's answers")
    @_guard
    async def wait_for_answer(
            question_id: Annotated[str, Field(min_length=1, max_length=200)], ctx: Context,
            timeout_s: Seconds = 60.0) -> Annotated[CallToolResult, Answers]:
        """Wait up to timeout_s seconds (at most 600) for the answers to ask_operator."""
        session = await session_for(ctx)
        session.run()
        asked = await session.bench.wait_answer(question_id, timeout_s)
        return _result(asked, answers_summary(asked))

    return server
