"""A write's commands going out, on the lane's turn after its recheck: in order, each kept
as a receipt line as it leaves (what the instrument got, and what it did not: a unit kept
back, one refused unsent), with what a save stores read around it (memories.py)."""

from __future__ import annotations

from .core import Instrument
from .errors import InstrumentError, NotSent, Refused, StoreError
from .instruments import AsyncLink
from .interlocks import Interlocks
from .memories import memory_of, trusted
from .models import SentLine, Snapshot, TakeoverRequest
from .safety import Written
from .sent import KEPT_BACK, on_the_wire
from .snapshots import Snapshots

__all__ = ["Sender"]


class Sender:
    def __init__(self, snaps: Snapshots, interlocks: Interlocks) -> None:
        self.snaps = snaps
        self.interlocks = interlocks

    async def send(self, link: AsyncLink, inst: Instrument, req: TakeoverRequest,
                    out: Written, lines: list[SentLine]) -> None:
        """The request's commands, in order, each kept in ``lines`` as it goes out; the first
        failure (or a stop) ends them, kept in ``out.error``."""
        profile = inst.profile
        try:
            self.interlocks.check(req.instrument)  # a stop since the recheck: no command
            for i, a in enumerate(req.actions):
                if inst.lane.halted:  # an emergency stop: not one more command
                    out.error = "an emergency stop was pressed during the write"
                    break
                form = profile.form_of(a.canonical)
                if a.effect == "select" or (form is not None and form.local):
                    # per run, or answered by the gateway (*CLS): never sent
                    lines.append(SentLine(text=a.canonical, sent=False, why=KEPT_BACK[
                        "select" if a.effect == "select" else "local"]))
                    continue
                memory = memory_of(profile, a.canonical)
                saving = await self._before_memory(link, inst, memory,
                                                   req.snapshot.idn)
                wire = on_the_wire(profile, a.canonical)
                lines.extend(wire)
                try:
                    if a.canonical.split(" ")[0].endswith("?"):
                        out.answers[i] = await link.query(a.canonical,
                                                          inst.extra_seconds(a.canonical))
                    else:
                        await link.write(a.canonical)
                except NotSent as exc:  # none of it left: the receipt says so
                    for ln in wire:
                        ln.sent, ln.why = False, exc.message
                    raise
                inst.ran(a.canonical)  # a reading's timeout follows what it set
                if saving is not None and memory is not None and \
                        await self._still(link, inst, saving) and \
                        self.snaps.memories.record(inst, memory[1], saving, req.id):
                    out.stored[memory[1]] = saving.values  # the receipt: what was kept
        except (InstrumentError, Refused) as exc:
            out.error = exc.message
        except StoreError as exc:  # (a save's records): never skips the read-back after
            out.error = f"the store failed during the write ({exc.message}): nothing more " \
                        "was sent"

    async def _before_memory(self, link: AsyncLink, inst: Instrument,
                             memory: tuple[str, str] | None, idn: str) -> Snapshot | None:
        """Before a unit that changes a stored state is sent: drop the records it makes
        unknown (a crash after the send leaves them unknown, never stale) and, for a save,
        read the whole state it stores, on this turn (bench_gate/memories.py); a file's is
        never kept (``memories.trusted``), so it is not read."""
        if memory is None or memory[0] == "recall":
            return None
        self.snaps.memories.before(inst, memory, idn)
        if memory[0] != "save" or not trusted(memory[1]):
            return None
        return await self.snaps.read_state(link, inst, self.snaps.every_field(inst))

    async def _still(self, link: AsyncLink, inst: Instrument, saving: Snapshot) -> bool:
        """Whether the state a save stored is the one read before it: read again at once.
        A change in between (at the front panel, by another program) may be in the slot
        or not: the slot is then unknown, and no record is kept."""
        again = await self.snaps.read_state(link, inst, self.snaps.every_field(inst))
        return again.idn == saving.idn and again.values == saving.values
