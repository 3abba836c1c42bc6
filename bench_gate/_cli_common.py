"""What every ``bench-gate`` command shares: the one-line error, printing, tables, times,
and the client of a running server."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from .client import Client
from .doorway import CHANGED_EXIT, ERROR_EXIT
from .texts import visible

__all__ = ["BROKEN", "CHANGED", "ERROR", "CliError", "client_for", "clip", "echo", "finite",
           "identity", "port", "print_json", "say", "seconds", "table", "until", "whole"]

ERROR = ERROR_EXIT
#: ``approve``/``deny``: the proposal changed since it was shown; nothing was decided.
CHANGED = CHANGED_EXIT
#: ``journal verify``: the chain is not intact (the first bad seq is printed).
BROKEN = 10


class CliError(Exception):
    """A failure to report in one line, without a traceback."""


def echo(text: str = "") -> None:
    """Print ``text``, any character a terminal would not show as itself escaped (a stored
    rationale's ESC [8m would hide every line printed after it)."""
    _out(visible(text))


def _out(text: str) -> None:
    """Print a line; a reader gone (``| head -1``, ``| true``) drops the rest of the output,
    never the command: it goes on and exits with its own code, with no traceback."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        try:
            fd = sys.stdout.fileno()
        except (AttributeError, OSError, ValueError):
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)  # what is still buffered, and every later line, goes nowhere
        os.close(devnull)


def finite(text: str) -> float:
    """An option's number: argparse's ``float`` takes ``nan``, ``inf`` and ``1e400`` (inf),
    which no JSON body can carry; a usage error instead."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return value


def seconds(text: str) -> float:
    """A duration: a finite number of seconds, 0 or more."""
    value = finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"a duration cannot be negative: {text!r}")
    return value


def port(text: str) -> int:
    """A TCP port, 0 to 65535 (0: a free one): bind() would raise OverflowError."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, not {value}")
    return value


def whole(low: int, high: int) -> Callable[[str], int]:
    """An option's whole number from ``low`` to ``high`` (argparse's ``int`` takes any)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be {low} to {high}, not {value}")
        return value
    parse.__name__ = "whole number"
    return parse


def say(text: str) -> None:
    """Print ``text`` as one line: a line break in it (a goal's, a question's, a close
    reason's) is escaped too, never a line of its own that reads as a row, an event or an
    option the server never sent."""
    _out(visible(text, lines=False))


def _parts(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep``; a SCPI message (``sep`` ';') into its units as the lexer
    finds them, so a ';' inside a quoted string never counts as a unit of its own."""
    if sep == ";":
        from .scpi import ScpiError, lex
        try:
            return [u.text for u in lex(text)]
        except ScpiError:
            pass
    return text.split(sep)


def clip(text: str, width: int, sep: str = ";") -> str:
    """``text`` cut to about ``width`` characters, never silently: whole parts (message
    units) that fit, then how many more there are; a first part longer than ``width`` is
    cut with an ellipsis. 'VOLT 1,(@1);...;VOLT 12,(@2)' cut at 40 read '...;VOLT 1', as if
    complete, and a value of 12 showed as 1."""
    if len(text) <= width:
        return text
    parts = _parts(text, sep)
    kept: list[str] = []
    for part in parts:
        if len(sep.join([*kept, part])) + 1 > width:
            break
        kept.append(part)
    more = len(parts) - len(kept)
    if not kept:
        return text[:width - 1] + "…"
    return f"{sep.join(kept)}{sep}… (+{more} more)"


def identity(args: argparse.Namespace) -> tuple[str, str]:
    """The server and the token a command speaks with."""
    token = args.token or os.environ.get("BENCH_GATE_TOKEN")
    if not token:
        raise CliError("no token: pass --token or set BENCH_GATE_TOKEN")
    return str(args.url), str(token)


def print_json(value: Any) -> int:
    echo(json.dumps(value, indent=2, ensure_ascii=False))
    return 0


def client_for(args: argparse.Namespace) -> Client:
    return Client(*identity(args))


def table(headers: list[str], rows: list[list[str]]) -> None:
    if not rows:
        echo("(none)")
        return
    rows = [[visible(str(x), lines=False) for x in row] for row in rows]  # one line each
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    for row in [headers, *rows]:
        echo("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=False)).rstrip())


def until(iso: str) -> str:
    """How long until ``iso`` (an RFC 3339 time): ``29m59s``, ``-1m05s`` once past."""
    seconds = int((datetime.fromisoformat(iso) - datetime.now(UTC)).total_seconds())
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    return f"{sign}{seconds // 60}m{seconds % 60:02d}s"
