"""``bench-gate mcp`` on stdio, ended with its client: a client gone (it exited or was
killed: stdin's write end is closed, or the process that started us is gone) closes the
session's run at once, so its pending requests are cancelled, journaled, and never run for
nobody (invariant 6). The SDK notices the end of stdin only between tool calls: with a call
in flight (``wait_for_decision`` long-polls for up to 10 minutes) the process, and its run,
outlived a SIGKILLed client, and a person could still grant the write.
"""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Awaitable, Callable

import anyio

from ._backend import ToolFailure
from ._lines import DRAIN_SECONDS
from ._server import AgentSession

__all__ = ["GONE_REASON", "client_gone", "serve_stdio"]

#: How often the client is looked for (a gone client's run closes within about this).
POLL_SECONDS = 0.2

GONE_REASON = "client gone: its MCP client on stdio ended"


def client_gone(parent: int, fd: int = 0) -> bool:
    """The client that started us is gone: our parent changed (we were re-parented), or
    the pipe on ``fd`` hung up (no writer left; POSIX poll(2) reports POLLHUP whatever is
    still unread). A terminal or a file on ``fd`` never hangs up this way."""
    if os.getppid() != parent:
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return any(ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL)
               for _, ev in poller.poll(0))


async def serve_stdio(run: Callable[[], Awaitable[None]], session: AgentSession,
                      beat_every: float | None = None) -> None:
    """``run()`` (the SDK's stdio server) until it ends or its client is gone; either way
    the session's run is closed before this returns. ``beat_every``: seconds between
    heartbeats for the session's run, so that if this process itself dies (SIGKILL, OOM)
    the gateway closes the run when its heartbeat term runs out (bench_gate/terms.py)."""
    parent = os.getppid()
    gone = False
    try:
        async with anyio.create_task_group() as tg:
            served = anyio.Event()

            async def serve() -> None:
                await run()
                served.set()
                tg.cancel_scope.cancel()

            async def watch() -> None:
                nonlocal gone
                while not client_gone(parent):
                    await anyio.sleep(POLL_SECONDS)
                gone = True
                # First, before anything in flight ends: the run's requests never run.
                await session.close(GONE_REASON)
                if os.getppid() == parent:  # only stdin ended: the client may still read
                    with anyio.move_on_after(DRAIN_SECONDS + 1):  # what is in flight answers
                        await served.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(serve)
            tg.start_soon(watch)
            if beat_every is not None:
                tg.start_soon(beat, session, beat_every)
    finally:
        if not gone:
            with anyio.CancelScope(shield=True):
                await session.close()


async def beat(session: AgentSession, every: float) -> None:
    """Heartbeat the session's run every ``every`` seconds, off the tool calls (a call may
    long-poll for minutes). A beat that fails (the server away for a moment) is tried again
    next time; a closed run has nothing left to keep, and is said once on stderr."""
    while True:
        await anyio.sleep(every)
        try:
            await session.heartbeat()
        except ToolFailure as exc:
            if exc.error == "conflict":  # the run is closed: its tools say so from now on
                print(f"bench-gate mcp: {exc.reason}", file=sys.stderr, flush=True)
                return
