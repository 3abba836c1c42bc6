"""What is done with the journal's hash chain: verify it (a store with its archived segments,
or a file on its own), export one run, and archive old events to segment files.

Export and segment files are JSON Lines: a header line (``bench_gate_journal``: 1, and
``kind``: ``"export"`` or ``"segment"``), then one event a line with every hashed field and
its hash: ``{"seq", "run", "request", "type", "at", "data", "prev", "hash"}``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import data_dir
from ..errors import InvalidInput, NotFound, StoreError
from ..models import Event, now
from ._chain import ENCODING, GENESIS, Link, Segment, row_event, row_link
from ._files import read_lines, write_lines
from ._walk import ChainReport, Problem, Walker

if TYPE_CHECKING:
    from ._base import Store

__all__ = ["archive", "default_archive_dir", "export_run", "verify_file", "verify_store"]

#: Events read from the store at a time.
PAGE = 5000
#: Events in one archived segment at most (an archive of more writes several).
SEGMENT_EVENTS = 50_000
#: What an export proves, and what it cannot, stated in every export file.
EXPORT_LIMIT = (
    "Each line verifies on its own (its fields give its hash, prev-hash included), and a "
    "line whose seq follows the line before links to it. A run's events interleave with other "
    "runs' in the store's one chain, and those are not in this file: on its own, the file "
    "cannot show that none of the run's events was left out. `bench-gate journal verify "
    "--file F --db STORE` checks every line against the store and its archive, both ways.")


def default_archive_dir(store: Store, configured: str | None = None) -> Path:
    """Where segment files go: ``configured`` (``[journal] archive_dir``), else a
    ``journal-archive`` folder beside a SQLite store's file, else in the data directory."""
    if configured:
        return Path(configured).expanduser()
    path = getattr(store, "path", None)
    if isinstance(path, str) and path != ":memory:":
        return Path(path).resolve().parent / "journal-archive"

    return data_dir() / "journal-archive"


def _segment_file(segment: Segment, archive_dir: Path | None) -> Path:
    """The segment's file: in ``archive_dir`` if it is there, else where it was written."""
    path = Path(segment.path)
    moved = archive_dir / path.name if archive_dir is not None else None
    return moved if moved is not None and moved.exists() else path


def _segment_events(segment: Segment, archive_dir: Path | None
                    ) -> tuple[Path, Iterator[dict[str, Any]]]:
    path = _segment_file(segment, archive_dir)
    header, lines = read_lines(path)
    if header.get("kind") != "segment" or header.get("first_seq") != segment.first_seq:
        raise ValueError(f"{path} is not the segment of seqs {segment.first_seq} to "
                         f"{segment.last_seq}")
    return path, lines


# ----------------------------------------------------------------------- verify
def verify_store(store: Store, archive_dir: Path | None = None) -> ChainReport:
    """Walk the archived segments, then the store's events, as one chain up to the store's
    recorded head. ``archive_dir`` looks for the segment files there instead of where they
    were written (they were moved)."""
    segments = store.segments()
    report = _walk_store(store, segments, archive_dir)
    if not report.intact and store.segments() != segments:
        report = _walk_store(store, store.segments(), archive_dir)  # archived meanwhile
    return report


def _walk_store(store: Store, segments: list[Segment], archive_dir: Path | None
                ) -> ChainReport:
    head_seq, head = store.journal_head()
    walker = Walker()
    for segment in segments:
        if not _walk_segment(walker, segment, archive_dir):
            return walker.report
    after = walker.seq
    while walker.report.intact:
        rows = [r for r in store.chain(after, PAGE) if int(r[0]) <= head_seq]
        for row in rows:
            try:
                item = row_link(row)
            except (TypeError, ValueError) as exc:
                walker.fail(int(row[0]), Problem.EDITED,
                            f"seq {row[0]} was edited: it no longer reads as an event ({exc})")
                break
            if not walker.feed(item):
                break
        if len(rows) < PAGE:
            break
        after = int(rows[-1][0])
    return walker.end(head_seq, head)


def _walk_segment(walker: Walker, segment: Segment, archive_dir: Path | None) -> bool:
    where = _segment_file(segment, archive_dir)
    try:
        path, lines = _segment_events(segment, archive_dir)
        for item in lines:
            if not walker.feed(Link.from_line(item)):
                return False
    except OSError as exc:
        return walker.fail(segment.first_seq, Problem.SEGMENT,
                           f"the archived segment of seqs {segment.first_seq} to "
                           f"{segment.last_seq} cannot be read: {where}: "
                           f"{exc.strerror or exc}")
    except ValueError as exc:
        return walker.fail(max(walker.seq + 1, segment.first_seq), Problem.SEGMENT,
                           f"the archived segment {where} is damaged: {exc}")
    if (walker.seq, walker.prev) != (segment.last_seq, segment.last_hash):
        return walker.fail(walker.seq + 1, Problem.SEGMENT,
                           f"the archived segment {path} ends at seq {walker.seq}; the store "
                           f"recorded it as ending at seq {segment.last_seq} "
                           f"({segment.last_hash[:16]}…)")
    walker.report.archived += segment.events
    walker.report.segments += 1
    return True


def verify_file(path: Path, store: Store | None = None, archive_dir: Path | None = None
                ) -> ChainReport:
    """Check an export or a segment file on its own; with ``store``, also that the store
    (and its archive) holds exactly these events: the same hash at every seq, and for an
    export no event of the run that the file lacks."""
    try:
        header, lines = read_lines(path)
    except OSError as exc:
        raise InvalidInput(f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc
    kind = header.get("kind")
    if kind not in ("export", "segment"):
        raise InvalidInput(f"{path}: kind {kind!r} is neither 'export' nor 'segment'")
    run = header.get("run")
    report = ChainReport()
    last_seq, last_hash, linked = 0, GENESIS, 0
    seen: dict[int, str] = {}
    if kind == "segment":
        last_seq = int(header.get("first_seq", 1)) - 1
        last_hash = str(header.get("prev", GENESIS))

    def fail(seq: int, problem: Problem, detail: str) -> ChainReport:
        report.intact, report.first_bad_seq = False, seq
        report.problem, report.detail = problem, detail
        return report

    try:
        for item in lines:
            ev = Link.from_line(item)
            if ev.seq <= last_seq and seen:
                return fail(ev.seq, Problem.OUT_OF_ORDER,
                            f"seq {ev.seq} comes after seq {last_seq}")
            follows = ev.seq == last_seq + 1 and (kind == "segment" or bool(seen))
            if kind == "segment" and ev.seq != last_seq + 1 and ev.prev != last_hash:
                return fail(last_seq + 1, Problem.MISSING,
                            f"seq {last_seq + 1} missing: seq {ev.seq}'s prev-hash is not "
                            f"the hash of seq {last_seq}")
            if follows and ev.prev != last_hash:
                return fail(ev.seq, Problem.RELINKED,
                            f"seq {ev.seq}'s prev-hash {ev.prev[:16]}… is not the hash of "
                            f"seq {last_seq} ({last_hash[:16]}…)")
            if ev.expected() != ev.hash:
                return fail(ev.seq, Problem.EDITED,
                            f"seq {ev.seq} ({ev.type}) was edited: its fields no longer "
                            f"give its hash {ev.hash[:16]}…")
            if run is not None and ev.run != run:
                return fail(ev.seq, Problem.EDITED,
                            f"seq {ev.seq} is an event of run {ev.run}, not {run}")
            linked += follows
            seen[ev.seq] = ev.hash
            last_seq, last_hash = ev.seq, ev.hash
    except ValueError as exc:
        return fail(last_seq + 1, Problem.EDITED, f"{path}: {exc}")
    report.events = len(seen)
    report.head_seq, report.head = last_seq, last_hash
    if len(seen) != header.get("events"):
        return fail(last_seq + 1, Problem.MISSING,
                    f"the header says {header.get('events')} events, the file has "
                    f"{len(seen)}")
    if kind == "segment" and (last_seq, last_hash) != (header.get("last_seq"),
                                                       header.get("last_hash")):
        return fail(last_seq, Problem.HEAD,
                    f"the segment ends at seq {last_seq}, its header says "
                    f"{header.get('last_seq')}")
    if seen:
        report.notes.append(
            f"{len(seen)} events at chain positions {min(seen)} to {max(seen)}; "
            f"{linked} link directly to the event before them in the file"
            + ("" if kind == "segment" else
               f", {len(seen) - linked - 1} follow events of other runs (not in the file)"))
    if store is not None:
        _against_store(report, seen, str(run) if run is not None else None, store,
                       archive_dir)
    return report


def _against_store(report: ChainReport, seen: dict[int, str], run: str | None, store: Store,
                   archive_dir: Path | None) -> None:
    """The store's hash at every seq of the file; for an export, every event of its run."""
    held: dict[int, str] = {}
    low, high = (min(seen), max(seen)) if seen else (0, 0)
    for segment in store.segments():
        if segment.last_seq < low or (run is None and segment.first_seq > high):
            continue
        try:
            _, lines = _segment_events(segment, archive_dir)
            for item in lines:
                if run is None or item.get("run") == run:
                    held[int(item["seq"])] = str(item["hash"])
        except (OSError, ValueError, KeyError) as exc:
            report.notes.append(f"the archived segment of seqs {segment.first_seq} to "
                                f"{segment.last_seq} could not be read: {exc}")
    if run is not None:
        after = 0
        while page := store.journal(run, after=after, limit=PAGE):
            held.update((e.seq, e.hash) for e in page)
            after = page[-1].seq
    else:
        after = low - 1
        while rows := [r for r in store.chain(after, PAGE) if int(r[0]) <= high]:
            held.update((int(r[0]), str(r[7])) for r in rows)
            after = int(rows[-1][0])
            if after >= high:
                break
    for seq, hash_ in sorted(seen.items()):
        if seq not in held:
            report.intact, report.first_bad_seq, report.problem = False, seq, Problem.MISSING
            report.detail = f"seq {seq} of the file is not in the store or its archive"
            return
        if held[seq] != hash_:
            report.intact, report.first_bad_seq, report.problem = False, seq, Problem.EDITED
            report.detail = (f"seq {seq} differs from the store's: the file has "
                             f"{hash_[:16]}…, the store {held[seq][:16]}…")
            return
    lacking = sorted(set(held) - set(seen)) if run is not None else []
    if lacking:
        report.intact, report.first_bad_seq, report.problem = (False, lacking[0],
                                                               Problem.MISSING)
        report.detail = (f"the store holds {len(lacking)} event(s) of run {run} the file "
                         f"lacks, the first at seq {lacking[0]}")
        return
    report.notes.append(f"the store holds the same hash at all {len(seen)} seqs"
                        + (", and no other event of the run" if run is not None else ""))


# ----------------------------------------------------------------------- export
def export_run(store: Store, run_id: str, path: Path, archive_dir: Path | None = None) -> int:
    """Write the run's events (archived ones included) with their hashes to ``path``:
    self-contained JSON Lines that :func:`verify_file` checks without the store."""
    events: list[Event] = []
    for segment in store.segments():
        try:
            _, lines = _segment_events(segment, archive_dir)
            events.extend(_line_event(item) for item in lines if item.get("run") == run_id)
        except (OSError, ValueError) as exc:
            raise StoreError(f"the archived segment of seqs {segment.first_seq} to "
                             f"{segment.last_seq} cannot be read ({exc}); pass the folder "
                             "it is in now") from exc
    after = 0
    while page := store.journal(run_id, after=after, limit=PAGE):
        events.extend(page)
        after = page[-1].seq
    if not events:
        raise NotFound(f"no journal events for run {run_id!r} in the store or its archive")
    head_seq, head = store.journal_head()
    header = {"bench_gate_journal": 1, "kind": "export", "encoding": ENCODING,
              "run": run_id, "events": len(events), "first_seq": events[0].seq,
              "last_seq": events[-1].seq, "store_head": {"seq": head_seq, "hash": head},
              "exported_at": now().isoformat(), "limit": EXPORT_LIMIT}
    return write_lines(path, header, events)


def _line_event(item: dict[str, Any]) -> Event:
    return Event(seq=item["seq"], run_id=item["run"], request_id=item["request"],
                 type=item["type"], at=datetime.fromisoformat(str(item["at"])),
                 data=item["data"], prev=item["prev"], hash=item["hash"])


# ----------------------------------------------------------------------- archive
def archive(store: Store, before: datetime, folder: Path, *,
            segment_events: int = SEGMENT_EVENTS) -> list[Segment]:
    """Move the store's oldest events, those journaled before ``before``, to segment files in
    ``folder`` and delete them from the store. What is archived is always the oldest part
    of the chain: the first event not older than ``before`` stops it, with everything
    after. Refuses (StoreError) when the part to archive is not intact."""
    done: list[Segment] = []
    previous = store.segments()
    seq, prev = (previous[-1].last_seq, previous[-1].last_hash) if previous else (0, GENESIS)
    while True:
        walker = Walker(seq, prev)
        taken: list[Event] = []
        stop = False
        after = seq
        while not stop and len(taken) < segment_events:
            rows = store.chain(after, min(PAGE, segment_events - len(taken)))
            stop = not rows
            for row in rows:
                try:
                    item, ev = row_link(row), row_event(row)
                except (TypeError, ValueError):
                    walker.fail(int(row[0]), Problem.EDITED, f"seq {row[0]} does not read "
                                                             "as an event")
                else:
                    if ev.at >= before:
                        stop = True
                        break
                    walker.feed(item)
                if not walker.report.intact:
                    report = walker.report
                    raise StoreError(f"the journal is broken at seq {report.first_bad_seq} "
                                     f"({report.detail}); nothing from there on was archived: "
                                     "run `bench-gate journal verify`")
                taken.append(ev)
            after = int(rows[-1][0]) if rows else after
        if not taken:
            return done
        path = folder / f"journal-{taken[0].seq:012d}-{taken[-1].seq:012d}.jsonl"
        segment = Segment(taken[0].seq, taken[-1].seq, len(taken), taken[0].prev,
                          taken[-1].hash, str(path.resolve()), now())
        header = {"bench_gate_journal": 1, "kind": "segment", "encoding": ENCODING,
                  "first_seq": segment.first_seq, "last_seq": segment.last_seq,
                  "events": segment.events, "prev": segment.prev,
                  "last_hash": segment.last_hash, "archived_at": segment.archived_at.isoformat(),
                  "before": before.isoformat()}
        try:
            write_lines(path, header, taken)
        except OSError as exc:
            raise StoreError(f"cannot write the segment {path}: {exc.strerror or exc}; "
                             "nothing was archived") from exc
        if not store.record_archive(segment):
            return done  # another archiver took these events first
        done.append(segment)
        seq, prev = segment.last_seq, segment.last_hash
        if stop:
            return done

