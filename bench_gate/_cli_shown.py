"""Which proposal the command line showed to whom: ``approve`` and ``deny`` name the one
their person was shown, never one they fetch at the moment of deciding.

``show`` (and a decision that printed a changed proposal) remembers the hash it printed, per
server and token (two people may share an account on a lab PC), one small file per request
under the data directory. Without ``--hash``, ``approve`` names that hash: if the proposal
changed since (another operator approved it with an edit), the server refuses it and the
new one is printed (exit 9); if nothing was shown, it is printed now and nothing is decided.
The file is written whole and renamed into place, so concurrent commands never read half
of one.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

from .config import data_dir

__all__ = ["recall", "remember"]

_SAFE_ID = re.compile(r"^[A-Za-z0-9_-]{1,200}$")


def _file(url: str, token: str, request_id: str) -> Path | None:
    if not _SAFE_ID.match(request_id):
        return None
    who = hashlib.sha256(f"{url.rstrip('/')}\n{token}".encode()).hexdigest()[:32]
    return data_dir() / "shown" / who / request_id


def remember(url: str, token: str, request_id: str, proposal_hash: str) -> None:
    """``proposal_hash`` of ``request_id`` was printed to this person just now."""
    path = _file(url, token, request_id)
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".shown-")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(proposal_hash)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def recall(url: str, token: str, request_id: str) -> str | None:
    """The hash of ``request_id`` last printed to this person, or None."""
    path = _file(url, token, request_id)
    try:
        return path.read_text().strip() or None if path is not None else None
    except OSError:
        return None
