"""The read path's shortcuts keep their promises: every read is journaled (in the read
log, folded in batches) before its answer returns, in order; a token revoked anywhere
stops working; a run's owner is checked without a store read only because runs never
change hands."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from bench_gate import auth
from bench_gate.auth import Tokens
from bench_gate.config import BenchConfig
from bench_gate.errors import NotFound, StoreError
from bench_gate.gateway import Gateway
from bench_gate.journal import ReadJournal
from bench_gate.models import Event, EventType, Principal
from bench_gate.store import ReadRow, SqliteStore, rows_of


def read_events(run: str, n: int) -> list[Event]:
    return [Event(run_id=run, type=EventType.COMMAND_RECEIVED, data={"message": f"Q{n}?"}),
            Event(run_id=run, type=EventType.READ_EXECUTED,
                  data={"message": f"Q{n}?", "response": str(n)})]


def test_a_reads_events_take_increasing_seqs_and_survive_a_reopen(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "j.db")
    written = [store.append(read_events("run-a", n), durable=False) for n in range(50)]
    seqs = [e.seq for pair in written for e in pair]
    assert seqs == sorted(seqs) and len(set(seqs)) == 100 and seqs[0] > 0
    store.close()
    again = SqliteStore(tmp_path / "j.db")
    journal = again.journal("run-a", limit=1000)
    assert [e.seq for e in journal] == seqs
    assert [e.data["message"] for e in journal[::2]] == [f"Q{n}?" for n in range(50)]
    assert all(e.type is EventType.READ_EXECUTED for e in journal[1::2])
    again.close()


async def test_reads_in_the_log_are_folded_in_batches_and_every_reader_sees_them(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "j.db")
    journal = ReadJournal(store, tmp_path / "j.reads", fold_seconds=0.002)
    journal.open()
    folds: list[int] = []
    plain = store.fold_rows

    def counting(rows: list[ReadRow], log_id: str, upto: int) -> None:
        folds.append(len(rows))
        plain(rows, log_id, upto)

    store.fold_rows = counting  # type: ignore[method-assign]

    async def read(n: int) -> None:
        await asyncio.sleep(0)
        journal.append_rows(rows_of(read_events(f"run-{n % 4}", n)))
        if n % 50 == 0:  # a reader of the journal folds first: it sees the read at once
            assert any(e.data.get("response") == str(n)
                       for e in store.journal(f"run-{n % 4}", limit=1000))

    await asyncio.gather(*(read(n) for n in range(200)))
    await journal.close()  # folds what is left
    assert sum(folds) == 400
    assert len(folds) < 50, "reads share folds"
    for r in range(4):
        events = store.journal(f"run-{r}", limit=1000)
        assert len(events) == 100
        assert [int(e.data["message"][1:-1]) for e in events[::2]] == list(range(r, 200, 4))
        for first, second in zip(events[::2], events[1::2], strict=True):
            assert second.seq == first.seq + 1 and first.data["message"] == second.data["message"]
    store.close()


async def test_a_fold_that_fails_keeps_the_reads_in_the_log(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "j.db")
    journal = ReadJournal(store, tmp_path / "j.reads", fold_seconds=0.001)
    journal.open()
    plain = store.fold_rows

    def broken(rows: list[ReadRow], log_id: str, upto: int) -> None:
        raise StoreError("store error: disk I/O error")

    store.fold_rows = broken  # type: ignore[method-assign]
    for n in range(5):
        journal.append_rows(rows_of(read_events("run-x", n)))
    await asyncio.sleep(0.05)  # the journal's fold fails, and says so in the log
    assert journal.log is not None and journal.log.pending == 5
    with pytest.raises(StoreError):  # nothing is journaled over reads not folded
        store.append([Event(run_id="run-x", type=EventType.STEP_STARTED)])
    store.fold_rows = plain  # type: ignore[method-assign]
    await journal.close()
    types = [e.type for e in store.journal("run-x", limit=100)]
    assert types == [EventType.COMMAND_RECEIVED, EventType.READ_EXECUTED] * 5
    store.close()


def test_a_token_revoked_here_fails_at_once_and_elsewhere_within_the_window(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SqliteStore(tmp_path / "t.db")
    tokens = Tokens(store)
    record, secret = tokens.create("alice", "operator")
    assert tokens.verify(secret) == Principal(name="alice", role="operator", token=record["id"])
    tokens.revoke("alice")
    assert tokens.verify(secret) is None

    _, other = tokens.create("bob", "requester")
    assert tokens.verify(other) is not None
    Tokens(SqliteStore(tmp_path / "t.db")).revoke("bob")  # the CLI, in another process
    clock = [time.monotonic()]
    monkeypatch.setattr(auth.time, "monotonic", lambda: clock[0])
    clock[0] += auth.VERIFIED_SECONDS + 0.01
    assert tokens.verify(other) is None
    store.close()


class _CountingStore(SqliteStore):
    """An SQLite store that counts its kv reads: how often a token is looked up."""

    reads = 0

    def kv_get(self, table: str, key: str) -> Any:
        self.reads += 1
        return super().kv_get(table, key)


def test_an_unknown_token_is_never_remembered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    frozen = time.monotonic()
    monkeypatch.setattr(auth.time, "monotonic", lambda: frozen)  # inside the window
    store = _CountingStore(tmp_path / "t.db")
    tokens = Tokens(store)
    _, known = tokens.create("alice", "operator")
    for _ in range(3):
        assert tokens.verify(known) is not None
    assert store.reads == 1, "a valid token is remembered (the window the test above bounds)"
    for n in range(3):
        assert tokens.verify("bg_" + "x" * 43) is None
        assert store.reads == 2 + n, "an unknown token is looked up afresh every time"
    store.close()


async def test_run_owner_knows_every_run_and_refuses_unknown_ones(
        gateway: Gateway, script: Principal) -> None:
    run = gateway.create_run(script, "script")
    assert gateway.run_owner(run.id) == script.name
    fresh = Gateway(gateway.config, gateway.store)  # knows nothing yet: reads the store
    assert fresh.run_owner(run.id) == script.name
    with pytest.raises(NotFound):
        fresh.run_owner("run-nope")


async def test_reads_from_many_tasks_all_reach_the_journal(
        gateway: Gateway, script: Principal) -> None:
    runs = [gateway.create_run(script, "script").id for _ in range(6)]

    async def client(run: str) -> None:
        for _ in range(10):
            result = await gateway.submit(run, "psu", "VOLT? (@1)")
            assert result.status == "executed"

    await asyncio.gather(*(client(r) for r in runs))
    for run in runs:
        types = [e.type for e in gateway.store.journal(run, limit=1000)]
        assert types.count(EventType.READ_EXECUTED) == 10
        assert types.count(EventType.COMMAND_RECEIVED) == 10


async def test_reads_go_to_the_read_log_and_an_unattended_write_is_fsynced(
        config: BenchConfig, db_path: Path, script: Principal) -> None:
    config.policy.output_off_is_safe = True  # OUTP OFF runs without a person
    gw = Gateway(config, SqliteStore(db_path))
    await gw.start()
    seen: list[tuple[list[str], str]] = []
    plain, logged = gw.store.append, gw.store.log_read_rows

    def spying(events: list[Event], durable: bool = True) -> list[Event]:
        seen.append(([e.type.value for e in events], "durable" if durable else "fast"))
        return plain(events, durable)

    def logging_(rows: list[ReadRow]) -> None:
        seen.append(([row[2] for row in rows], "read log"))
        logged(rows)

    gw.store.append = spying  # type: ignore[method-assign]
    gw.store.log_read_rows = logging_  # type: ignore[method-assign]
    try:
        run = gw.create_run(script, "script").id
        assert (await gw.submit(run, "psu", "VOLT? (@1)")).status == "executed"
        assert (await gw.submit(run, "psu", "OUTP OFF,(@1)")).status == "executed"
        types = [e.type.value for e in gw.store.journal(run, limit=100)]
    finally:
        await gw.close()
        gw.store.close()
    assert seen == [(["command_received", "read_executed"], "read log"),
                    (["command_received", "read_executed"], "durable")]
    # The write's events come after the read's: the read was folded first.
    assert types == ["run_created", "command_received", "read_executed",
                     "command_received", "read_executed"]
