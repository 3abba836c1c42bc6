"""What a receipt says was sent: each text exactly as the instrument got it, with what the
gateway added on the wire and what it kept back, and why, so the person reading a receipt
tells what was asked from what the gateway did (a selection per run is never sent; on an
instrument that addresses outputs by selection, every command that names one goes out
after the gateway's own select command, on the same lane turn: ``Profile.wire``).
"""

from __future__ import annotations

from .models import SentLine
from .scpi import Profile

__all__ = ["KEPT_BACK", "on_the_wire"]

#: Why a unit of the request was not sent.
KEPT_BACK = {
    "select": "not sent: a selection is kept per run; the gateway writes each later "
              "command with its output",
    "local": "not sent: answered by the gateway (this connection's own status and "
             "error view; the instrument's is every client's)",
}


def on_the_wire(profile: Profile, canonical: str) -> list[SentLine]:
    """The texts ``canonical`` goes out as (``Profile.wire``, as the lane sends it): the
    gateway's select commands first, marked added with why, then the command itself."""
    texts = profile.wire(canonical) or (canonical,)
    *selects, text = texts
    why = (f"added by the gateway: selects the output for the command after it "
           f"({profile.model.title or profile.name} addresses outputs by selection, not "
           "by a channel list)")
    return [*(SentLine(text=s, added=True, why=why) for s in selects), SentLine(text=text)]
