"""Stored states: what the gateway saw an instrument save, so that a recall is judged on
the state it brings back before it is sent (invariant 4, on the predicted state).

IEEE 488.2 §10.29 ``*SAV`` stores the present state in a slot and §10.27 ``*RCL`` brings it
back: levels and outputs no snapshot can read beforehand, energized at once. So
(``FormSpec.memory`` says which forms do what):

- a save through the gateway (``memory: save``) reads every field of every channel on its
  lane turn just before it is sent, and records that state under its slot or file. The
  old record is dropped before the save is sent: a crash between the two leaves the slot
  unknown, never stale. The state is read again right after the save: a change in
  between (the panel) may or may not be in the slot, so it keeps no record;
- a recall (``memory: recall``) on an instrument with envelope limits is judged on that
  record like any proposed state: outside the envelope, it is refused (-222) and never
  sent. A slot with no record (saved at the front panel, by another program, on another
  instrument, or never) is refused too: nothing could judge it before it runs. A state
  loaded from a file is always refused: which file a name means is the instrument's to
  decide (:func:`trusted`), so a file save keeps no record;
- a recall after a save or forget in the same message is refused (-221, policy.decide):
  it would be judged on the record from before the message; so is one after another unit
  that may replace every channel's state (a recall, ``*RST``): what it does not restore
  would be judged on a state no snapshot read;
- a command that may change what any stored state holds (``memory: forget``: a file
  deleted, copied or moved; and any header the profile does not know, sent on a profile
  that is not complete) drops every record of the instrument; a slot save drops the
  file records and a file save the slot ones, since an instrument may keep one as the other.

A slot saved again at the front panel after the gateway recorded it is the one change the
record cannot see: the read-back after the recall finds it and makes it safe, as it does
for anything done at the panel. Records are kept in the store per bench and instrument
(every gateway on a shared store sees them), with the ``*IDN?`` they were saved on; a save
or forget drops the records of every name whose instrument answered the same ``*IDN?``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

from .core import Core, Instrument, Part
from .models import Snapshot
from .scpi import Profile
from .scpi.units import magnitude

__all__ = ["META", "MIXES", "SAVED_AT", "TABLE", "Memories", "memory_of", "mixes",
           "predicted", "stored_state",
           "trusted"]

TABLE = "memories"
#: Keys of a recalled record that are about it, not the state it holds.
META = "@"
SAVED_AT = f"{META}saved_at"
#: The most mixes of a live state and a record :func:`mixes` makes; more is judged outside.
MIXES = 4096


def _first_argument(canonical: str) -> str:
    """The first parameter of a canonical unit as rendered: a number, or a string with its
    quotes (a ',' inside the quotes belongs to it; IEEE 488.2 §7.7.5 doubles a quote)."""
    rest = canonical.partition(" ")[2]
    if not rest.startswith('"'):
        return rest.split(",", 1)[0]
    i = 1
    while i < len(rest):
        if rest[i] == '"':
            if rest[i + 1:i + 2] == '"':
                i += 2
                continue
            return rest[:i + 1]
        i += 1
    return rest


def memory_of(profile: Profile, canonical: str) -> tuple[str, str] | None:
    """What a canonical unit does to the instrument's stored states: (``save``, ``recall``
    or ``forget``, the slot or file it names: ``slot 3``, ``file "a.sta"``), or None."""
    form = profile.form_of(canonical)
    if form is None:
        # A header the profile does not know (held on a profile that is not complete) may
        # store or delete any state: the DP832's :MEMory:STORe RSF,1 writes *SAV's slot 1.
        return "forget", ""
    if form.memory is None:
        return None
    if form.memory == "forget":
        return "forget", ""
    kind = "slot" if form.params[0].type == "integer" else "file"
    return form.memory, f"{kind} {_first_argument(canonical)}"


def stored_state(profile: Profile, canonical: str, record: dict[str, str]
                 ) -> tuple[dict[str, str], dict[str, str]]:
    """A recalled record's fields (not what is about it, ``@saved_at``) in two parts: those
    the recall brings back for sure (the form's ``restores``), and the others, which it
    may or may not bring back (every field, when the profile names none)."""
    form = profile.form_of(canonical)
    named = set(form.restores) if form is not None else set()
    sure: dict[str, str] = {}
    unsure: dict[str, str] = {}
    for key, value in record.items():
        if not key.startswith(META):
            (sure if key.split(".", 1)[-1] in named else unsure)[key] = value
    return sure, unsure


def predicted(profile: Profile, canonical: str, record: dict[str, str]) -> dict[str, str]:
    """What the recall is expected to bring back: the fields it restores for sure, or,
    when the profile names none, everything recorded (the read-back says if it did)."""
    sure, unsure = stored_state(profile, canonical, record)
    return sure if sure else unsure


def mixes(profile: Profile, live: dict[str, str], record: dict[str, str]
          ) -> Iterator[dict[str, str]] | None:
    """Every state a recall may leave when the instrument restores only some of what it
    stored (IEEE 488.2 §10.29 leaves what a saved state holds to the device): each field
    at its live or its stored value. A number field is taken at the larger magnitude of
    the two (an upper limit is never safer higher); every other field that differs (an
    output, a protection switched off, a coupling, a mode) at each value in turn. None
    when that makes more than :data:`MIXES` states."""
    state = {**live, **record}
    either: list[str] = []
    for key in sorted(live.keys() & record.keys()):
        a, b = live[key], record[key]
        if a == b:
            continue
        spec = profile.fields.get(key.split(".", 1)[-1])
        ma, mb = magnitude(a), magnitude(b)
        # A list's farthest point decides (magnitude).
        if spec is not None and spec.type == "number" and ma is not None and mb is not None:
            state[key] = a if ma > mb else b
        else:
            either.append(key)
    if 2 ** len(either) > MIXES:
        return None
    pairs = [((k, live[k]), (k, record[k])) for k in either]
    return ({**state, **dict(choice)} for choice in itertools.product(*pairs))


def trusted(key: str) -> bool:
    """Whether a record kept under ``key`` can say what a later recall of it brings back: a
    numbered slot's, yes; a file's, never. The instrument resolves a file name against its
    own current folder (``MMEM:CDIR``, set back by ``*RST`` and changed at the panel), its
    drive and its naming rules (case, spaces, ``./``, ``..``): two spellings may name one
    file, and one spelling two files, so a record under the name as written may be of
    another file than the one the recall loads."""
    return key.startswith("slot ")


class Memories(Part):
    """The records of stored states, in the store's ``memories`` table."""

    def __init__(self, core: Core) -> None:
        super().__init__(core)

    def _prefix(self, inst: Instrument) -> str:
        return f"{self.core.qualified(inst.config.name)}/"

    def recalled(self, inst: Instrument, canonicals: Iterable[str], idn: str
                 ) -> dict[str, dict[str, str]]:
        """The record of every stored state the units recall, saved on the instrument
        that answers ``idn`` now: its state, with ``@saved_at`` and ``@request``."""
        out: dict[str, dict[str, str]] = {}
        for canonical in canonicals:
            memory = memory_of(inst.profile, canonical)
            if memory is None or memory[0] != "recall" or not trusted(memory[1]):
                continue
            record = self.store.kv_get(TABLE, self._prefix(inst) + memory[1])
            if record is not None and record.get("idn") == idn:
                out[memory[1]] = {SAVED_AT: str(record["saved_at"]),
                                  f"{META}request": str(record["request"]),
                                  **{str(k): str(v) for k, v in record["state"].items()}}
        return out

    def before(self, inst: Instrument, memory: tuple[str, str], idn: str) -> None:
        """Drop what a save or forget about to be sent to the instrument that answers
        ``idn`` makes unknown (a recall, nothing): under its own name and under any other
        name, on any bench, whose record was saved on an instrument answering the same
        ``*IDN?`` (the same instrument reached twice: its slots are its own, not a name's)."""
        role, key = memory
        if role == "recall":
            return
        prefix = self._prefix(inst)
        other = "file " if key.startswith("slot ") else "slot "
        for name, record in self.store.kv_items(TABLE):
            if not (name.startswith(prefix) or record.get("idn") == idn):
                continue
            # A slot's name has no "/" (a file's record is never trusted: :func:`trusted`).
            slot = name.removeprefix(prefix) if name.startswith(prefix) else \
                name.rsplit("/", 1)[-1]
            if role == "forget" or slot == key or slot.startswith(other):
                self.store.kv_delete(TABLE, name)

    def record(self, inst: Instrument, key: str, state: Snapshot, request_id: str) -> bool:
        """Keep the state a save sent just now stored, as read on its lane turn before it
        (a file's, never: :func:`trusted`). Whether it was kept."""
        if not trusted(key):
            return False
        self.store.kv_put(TABLE, self._prefix(inst) + key, {
            "idn": state.idn, "state": state.values, "request": request_id,
            "saved_at": self.clock().isoformat()})
        return True
