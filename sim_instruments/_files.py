"""State files of a simulated instrument's internal file system (``MMEMory``).

As the Keysight guides describe a file name (Truevolt Operating and Service Guide and
53220A/53230A Programmer's Reference, "Folder and file formats"): ``[[<drive>:]<path>]<name>``;
with a drive the path is absolute, without one it is relative to the folder
``MMEMory:CDIRectory`` selected, which ``*RST`` sets back to the root; ``\\`` and ``/`` both
separate folders. Names are matched without regard to case and surrounding spaces, as a
FAT file system does (unverified on an E36300). Only what the gateway must not assume is
modelled: which spellings name one file.
"""

from __future__ import annotations

import re

__all__ = ["StateFiles"]

_DRIVE = re.compile(r"^\s*[A-Za-z]+:")
_QUOTED = re.compile(r'"((?:[^"]|"")*)"')


class StateFiles:
    """Stored states by the file they are in, and the current folder."""

    def __init__(self) -> None:
        self.folder: tuple[str, ...] = ()
        self.files: dict[tuple[str, ...], dict[str, int | float | str]] = {}

    def resolve(self, name: str) -> tuple[str, ...]:
        """The file (or folder) a name means now: its folders and name, case folded."""
        text = name.strip()
        absolute = bool(_DRIVE.match(text))
        text = _DRIVE.sub("", text)
        if text.startswith(("/", "\\")):
            absolute = True
        parts = list(() if absolute else self.folder)
        for part in re.split(r"[/\\]", text):
            part = part.strip().casefold()
            if part in ("", "."):
                continue
            if part == "..":
                if parts:
                    parts.pop()
                continue
            parts.append(part)
        return tuple(parts)

    @staticmethod
    def argument(canonical: str) -> str | None:
        """The first quoted parameter of a canonical unit, unquoted."""
        m = _QUOTED.search(canonical)
        return m[1].replace('""', '"') if m else None
