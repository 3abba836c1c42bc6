"""Each run's selected channel per instrument (``INST:NSEL 2``, ``INST CH2``).

A selection is per run and never sent (docs/scpi.md): a later ``VOLT 5`` of the same run
means the channel it selected, whatever the instrument's own selection. It is kept in the
store, so a restart keeps it: held in memory only, a restart made the run's next ``VOLT 5``
mean the instrument's own selection or the profile's default channel (DESIGN.md invariant
6, a crash loses nothing).
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from .core import Core, Instrument, Part
from .errors import InstrumentError
from .instruments import AsyncLink
from .scpi import Profile

__all__ = ["SELECTIONS", "Selections", "read_selection"]

#: The store's key-value table of selections: ``run/bench/instrument`` -> the channel.
SELECTIONS = "selections"


class Selections(Part):
    """Read through to the store once per (run, instrument); written only on a change."""

    def __init__(self, core: Core) -> None:
        super().__init__(core)
        self._known: dict[tuple[str, str], int | None] = {}

    def _key(self, run_id: str, instrument: str) -> str:
        # Instrument names are per bench: two gateways on one store may both have a psu.
        return f"{run_id}/{self.config.bench}/{instrument}"

    def get(self, run_id: str, instrument: str) -> int | None:
        key = (run_id, instrument)
        if key not in self._known:
            kept = self.store.kv_get(SELECTIONS, self._key(run_id, instrument))
            self._known[key] = int(kept["channel"]) if kept else None
        return self._known[key]

    def set(self, run_id: str, instrument: str, channel: int, profile: Profile) -> None:
        """Keep ``channel``. A run still on the profile's default (``addressing``) with
        nothing kept needs no row: no selection means the default."""
        kept = self.get(run_id, instrument)
        default = profile.addressing.default if profile.addressing is not None else None
        if kept == channel or (kept is None and channel == default):
            return
        self.store.kv_put(SELECTIONS, self._key(run_id, instrument),
                          {"run_id": run_id, "bench": self.config.bench, "instrument": instrument,
                           "channel": channel})
        self._known[(run_id, instrument)] = channel

    def forget(self, run_id: str) -> None:
        """A closed run runs nothing more: its selections go, from memory and the store.
        Kept, every connection of a script that reconnects for each reading (a run each)
        left a row and an entry for good."""
        for instrument in self.core.instruments:
            key = self._key(run_id, instrument)
            if (run_id, instrument) in self._known:  # read through once: the row is known
                kept = self._known.pop((run_id, instrument)) is not None
            else:
                kept = self.store.kv_get(SELECTIONS, key) is not None
            if kept:
                self.store.kv_delete(SELECTIONS, key)


async def read_selection(link: AsyncLink, inst: Instrument) -> int | None:
    """The instrument's own selection (``addressing.query``), read on the caller's lane
    turn after a recall restored it; None if unreadable (the run's selection then stays)."""
    spec = inst.profile.model.addressing
    if spec is None or spec.query is None:
        return None
    try:
        channel = int(Decimal((await link.query(spec.query)).strip()))
    except (InstrumentError, InvalidOperation, ValueError):
        return None
    return channel if channel in inst.profile.channels else None
