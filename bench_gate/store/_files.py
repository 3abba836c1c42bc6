"""The journal's export and segment files: JSON Lines, a header line and then one event a
line (``_chain.event_line``), written durably (a temporary file, fsync, rename).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..models import Event
from ._chain import _SEP, event_line

__all__ = ["read_lines", "write_lines"]


def read_lines(path: Path) -> tuple[dict[str, Any], Iterator[dict[str, Any]]]:
    """(the header, the event lines) of an export or segment file."""
    handle = path.open(encoding="utf-8")
    first = handle.readline()
    try:
        header = json.loads(first)
    except ValueError as exc:
        handle.close()
        raise ValueError(f"{path}: the first line is not a bench-gate journal header") \
            from exc
    if not isinstance(header, dict) or "bench_gate_journal" not in header:
        handle.close()
        raise ValueError(f"{path}: the first line is not a bench-gate journal header")

    def lines() -> Iterator[dict[str, Any]]:
        with handle:
            for number, text in enumerate(handle, start=2):
                if not text.strip():
                    continue
                try:
                    item = json.loads(text)
                except ValueError as exc:
                    raise ValueError(f"{path}:{number}: not JSON: {exc}") from exc
                if not isinstance(item, dict):
                    raise ValueError(f"{path}:{number}: not a journal line")
                yield item
    return header, lines()


def write_lines(path: Path, header: Mapping[str, Any], events: Iterable[Event]) -> int:
    """Write a header and the events as JSON Lines, durably (a temporary file, fsync, then
    renamed into place). Returns how many events were written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    # Readable by its owner only, as the store it comes from (a leftover first: O_TRUNC
    # would keep its mode).
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with open(fd, "w", encoding="utf-8") as out:
        out.write(json.dumps(dict(header), separators=_SEP) + "\n")
        for ev in events:
            out.write(json.dumps(event_line(ev), separators=_SEP, default=str) + "\n")
            count += 1
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(path)
    try:  # the rename itself reaches the disk (POSIX; best effort elsewhere)
        folder = os.open(path.parent, os.O_RDONLY)
    except OSError:  # pragma: no cover
        return count
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return count
