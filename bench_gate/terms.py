"""Heartbeat terms: a run whose client is gone is closed, so its requests never run for
nobody (invariant 6), even when nothing told the gateway the client went.

A run created with a term (``heartbeat_seconds``) must be heard from, by its own client
(any submit, or ``POST /v1/runs/{id}/heartbeat``), at least once a term. A run silent for a
whole term is closed with the reason "client gone: no heartbeat for N s": its undecided and
approved-but-unstarted requests are cancelled as any closing does, the closing is
journaled, and every console is told live (an alert). A write already executing is left
to finish (closing never cuts a write in half); one still waiting for its lane is refused
on its turn (``Rechecks.closed_refusal``).

The term is kept in the store (table ``run_terms``), so a restart never forgets it; when a
run was last heard is kept in memory, so after a restart every term starts again from
start-up: the process being down never closes a run early. The gateway of the bench the
run was created on keeps the term; another gateway on the same store that hears the
client writes a new beat token into the term's record (at most once a second), which the
keeper, seeing it change, counts as heard by its own clock.

Nor does the process being down prove the client is there: after a (re)start, an approved
request of a run with a term waits until the client is heard again (``confirmed``), or
its run closes a term later; it never runs for a client that went with the crash. The
keeper records in the term which of its starts heard the client (``heard_by``, its
instance), so another bench's gateway executes only on that word of the live keeper's, or
on its own hearing. A keeper that is gone (its claim stale, bench_gate/federation.py)
keeps nothing: the other gateways keep its terms, counting from when they found it gone.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from .core import Core, Part
from .errors import GatewayError, InvalidInput, NotFound
from .runs import TERMS, Runs

__all__ = ["BEATS_PER_TERM", "MAX_TERM", "MIN_TERM", "TERMS", "Terms", "check_term"]

#: Bounds of a term, in seconds: above a few sweeps (0.5 s each), at most a day (the
#: longest a request may wait, ``timeout_minutes`` 1440).
MIN_TERM, MAX_TERM = 2, 86_400
#: How often a client of ours (``bench-gate mcp``) heartbeats in each term: a beat or two
#: may be lost (the network, a busy server) before the run closes.
BEATS_PER_TERM = 4
#: Another bench's gateway writes that it heard a client at most this often (seconds).
WRITE_EVERY = 1.0
#: Runs whose term is remembered here; past this the memory starts over.
REMEMBERED = 100_000


def check_term(seconds: object) -> int | None:
    """The term as given (whole seconds within bounds), or InvalidInput saying why."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int) \
            or not MIN_TERM <= seconds <= MAX_TERM:
        raise InvalidInput(f"heartbeat_seconds must be a whole number of seconds from "
                           f"{MIN_TERM} to {MAX_TERM}, not {seconds!r}", "heartbeat_seconds")
    return seconds


class Terms(Part):
    def __init__(self, core: Core, runs: Runs) -> None:
        super().__init__(core)
        self.runs = runs
        #: Each run's term record as read (None: the run has none). A term never changes.
        self._records: dict[str, dict[str, Any] | None] = {}
        #: When each run's client was last heard here (monotonic seconds).
        self._heard: dict[str, float] = {}
        #: When this gateway last wrote a beat into another bench's run's record.
        self._written: dict[str, float] = {}
        #: The last beat token seen in each of this bench's records (written by another).
        self._beats: dict[str, str] = {}
        #: Runs of a gone keeper's bench this gateway keeps, and since when (monotonic).
        self._adopted: dict[str, float] = {}
        self._started = time.monotonic()

    def start(self) -> None:
        """Every term starts again from now: the process being down is no silence."""
        self._started = time.monotonic()
        self._heard.clear()
        self._adopted.clear()
        # A beat token written before this start is no hearing since it (``confirmed``).
        self._beats = {run_id: str(record["beat"]) for run_id, record in
                       self.store.kv_items(TERMS) if record.get("beat") is not None}

    def heard(self, run_id: str) -> None:
        """The run's own client was heard from (a submit, a heartbeat)."""
        record = self._record(run_id)
        if record is None:
            return
        at = self._heard[run_id] = time.monotonic()
        instance = self.core.registry.instance
        if record.get("bench") == self.config.bench:
            if record.get("heard_by") != instance:
                # The keeper's word that its client is there since this start (confirmed).
                self._remember(run_id, {**record, "heard_by": instance})
                self._update(run_id, heard_by=instance)
        elif at - self._written.get(run_id, -WRITE_EVERY) >= WRITE_EVERY:
            # Another bench keeps this term: it learns of the client through the store, by
            # a new beat token (no wall time: two hosts' clocks never have to agree).
            self._written[run_id] = at
            self._update(run_id, beat=secrets.token_hex(8))

    def _update(self, run_id: str, **changes: str) -> None:
        """Set ``changes`` in the run's term record as the store holds it now (another
        gateway's change kept), unless it has closed."""
        fresh = self.store.kv_get(TERMS, run_id)
        if fresh is not None:
            self.store.kv_put(TERMS, run_id, {**fresh, **changes})

    def left(self, run_id: str) -> float | None:
        """Seconds left of the run's term as this gateway counts it (None: no term)."""
        record = self._record(run_id)
        if record is None:
            return None
        return max(0.0, float(record["seconds"]) - self._silent(run_id))

    def confirmed(self, run_id: str) -> bool:
        """Whether the run's client is known to be there since this gateway (or, for
        another bench's run, its keeper) last started: a run without a term always is."""
        record = self._record(run_id)
        if record is None:
            return True
        heard = self._heard.get(run_id)
        if heard is not None and time.monotonic() - heard < float(record["seconds"]):
            return True  # heard here within its term
        bench = str(record.get("bench"))
        if bench == self.config.bench:
            return False  # the keeper has only its own hearing (creating a run is one)
        fresh = self.store.kv_get(TERMS, run_id)
        if fresh is None:
            return True  # closed meanwhile: the run's own check refuses it
        keeper = self.core.registry.instance_of(bench)
        return keeper is not None and fresh.get("heard_by") == keeper

    def sweep(self) -> list[str]:
        """Close every run of this bench silent for a whole term, and of a bench whose
        gateway is gone (kept here from when it was found gone); returns their ids. None
        on a fenced gateway: its bench's clients are heard by the new owner, not here."""
        if self.core.registry.lost is not None:
            return []
        closed = []
        live: dict[str, bool] = {}
        for run_id, record in self.store.kv_items(TERMS):
            bench = str(record.get("bench"))
            if bench != self.config.bench:
                if bench not in live:
                    live[bench] = self.core.registry.alive(bench)
                if live[bench]:
                    self._adopted.pop(run_id, None)  # its keeper is back: it counts
                    continue
                self._adopted.setdefault(run_id, time.monotonic())
            beat = record.get("beat")
            if beat is not None and self._beats.get(run_id) != beat:
                self._beats[run_id] = beat  # another gateway heard the client since
                self._heard[run_id] = time.monotonic()
            seconds = int(record["seconds"])
            if self._silent(run_id) < seconds:
                continue
            reason = f"client gone: no heartbeat for {seconds} s"
            try:
                self.runs.close(run_id, reason)
            except NotFound:  # created, then lost before its run was (a crash between)
                self.store.kv_delete(TERMS, run_id)
                continue
            except GatewayError:  # the store, for a moment: tried again next sweep
                continue
            self.forget(run_id)
            self.core.notifier.publish("alert", alert="client_gone", run_id=run_id,
                                       reason=f"{run_id}: {reason}; its undecided requests "
                                              "were cancelled, nothing of them was written")
            closed.append(run_id)
        return closed

    def created(self, run_id: str, seconds: int | None) -> None:
        """A run made here: its term (if any) starts now, and the first submit of a run
        without one reads no store to learn that."""
        self._remember(run_id, None if seconds is None
                       else {"bench": self.config.bench, "seconds": seconds,
                             "heard_by": self.core.registry.instance})
        if seconds is not None:
            self.heard(run_id)

    def forget(self, run_id: str) -> None:
        for memory in (self._heard, self._written, self._beats, self._adopted):
            memory.pop(run_id, None)
        self._records[run_id] = None

    def _silent(self, run_id: str) -> float:
        """Seconds since the client was last heard (never before this gateway's start, nor
        before it took the run over from a gone keeper)."""
        return time.monotonic() - max(self._heard.get(run_id, 0.0), self._started,
                                      self._adopted.get(run_id, 0.0))

    def _record(self, run_id: str) -> dict[str, Any] | None:
        if run_id in self._records:
            return self._records[run_id]
        record = self.store.kv_get(TERMS, run_id)
        self._remember(run_id, record)
        return record

    def _remember(self, run_id: str, record: dict[str, Any] | None) -> None:
        if len(self._records) >= REMEMBERED:  # bounded; each is read again when needed
            self._records.clear()
            self._written.clear()
        self._records[run_id] = record
