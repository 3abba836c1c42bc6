"""The PostgreSQL store's schema: its migrations, entry for entry the same changes as the
SQLite store's (``bench_gate.store._sqlite_schema.MIGRATIONS``), written in PostgreSQL's dialect.
``PostgresStore.migrate`` applies them.
"""

from __future__ import annotations

from ._sqlite_schema import MIGRATIONS as SQLITE_MIGRATIONS

__all__ = ["MIGRATIONS"]

#: Each entry moves the schema one version up, entry for entry the same change as the SQLite
#: store's ``MIGRATIONS`` (same length, same order). Never edit a released entry: append.
#: (Migration 1 creates its two request indexes last; the schema is the same.)
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE runs (
        id TEXT COLLATE "C" PRIMARY KEY,
        created_at TIMESTAMPTZ NOT NULL,
        data TEXT NOT NULL
    );
    CREATE TABLE requests (
        id TEXT COLLATE "C" PRIMARY KEY,
        run_id TEXT COLLATE "C" NOT NULL,
        instrument TEXT COLLATE "C" NOT NULL,
        status TEXT NOT NULL,
        created_at TIMESTAMPTZ NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL,
        idempotency_key TEXT COLLATE "C",
        version INTEGER NOT NULL,
        data TEXT NOT NULL,
        UNIQUE (run_id, idempotency_key)
    );
    CREATE TABLE journal (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_id TEXT COLLATE "C" NOT NULL,
        request_id TEXT COLLATE "C",
        type TEXT NOT NULL,
        at TIMESTAMPTZ NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX journal_run ON journal (run_id, seq);
    CREATE TABLE setpoints (
        instrument TEXT COLLATE "C" NOT NULL,
        channel INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (instrument, channel)
    );
    CREATE TABLE kv (
        tbl TEXT COLLATE "C" NOT NULL,
        key TEXT COLLATE "C" NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (tbl, key)
    );
    CREATE INDEX requests_status ON requests (status, created_at);
    CREATE INDEX requests_run ON requests (run_id, created_at);
    """,
    # 2: who owns a run and whether it is closed, as columns (per-requester quotas count
    # them); the queue sorted by expiry.
    """
    ALTER TABLE runs ADD COLUMN principal TEXT COLLATE "C";
    ALTER TABLE runs ADD COLUMN status TEXT;
    UPDATE runs SET principal = data::json->>'principal', status = data::json->>'status';
    CREATE INDEX runs_principal ON runs (principal, status);
    CREATE INDEX requests_expiry ON requests (status, expires_at);
    """,
    # 3: each request names its requester (its run's principal), so one requester's
    # pending requests are counted from an index, however many others wait.
    """
    ALTER TABLE requests ADD COLUMN requester TEXT COLLATE "C";
    UPDATE requests SET requester = runs.principal FROM runs WHERE runs.id = requests.run_id;
    CREATE INDEX requests_requester ON requests (requester, status, expires_at);
    """,
    # 4: the journal's hash chain (bench_gate.store._chain): each event's prev-hash and
    # hash; the head every append locks and continues; the archived segments. The store
    # then chains the events it holds, in seq order.
    """
    ALTER TABLE journal ADD COLUMN prev TEXT COLLATE "C";
    ALTER TABLE journal ADD COLUMN hash TEXT COLLATE "C";
    CREATE TABLE journal_head (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        seq BIGINT NOT NULL,
        hash TEXT COLLATE "C" NOT NULL
    );
    CREATE TABLE journal_segments (
        first_seq BIGINT PRIMARY KEY,
        last_seq BIGINT NOT NULL,
        events BIGINT NOT NULL,
        prev TEXT COLLATE "C" NOT NULL,
        last_hash TEXT COLLATE "C" NOT NULL,
        path TEXT NOT NULL,
        archived_at TIMESTAMPTZ NOT NULL
    );
    """,
    # 5: each request's list document beside it (listing.listed_document), so a page parses a
    # fraction of each request; a request saved before it is listed from its data.
    """
    ALTER TABLE requests ADD COLUMN listed TEXT;
    """,
    # 6: one index per sort holding its whole order (status, the sort's time, the id that
    # breaks ties), as in SQLite, so a page is read in order, not sorted. Without the list
    # document: a B-tree entry over about 2.7 kB is refused (a long rationale would make
    # the request's INSERT fail), and TOAST keeps a long whole document compressed or out
    # of line, so reading the list document beside it does not unpack it.
    """
    CREATE INDEX requests_newest ON requests (status, created_at DESC, id);
    CREATE INDEX requests_soonest ON requests (status, expires_at, id);
    DROP INDEX requests_status;
    DROP INDEX requests_expiry;
    """,
    # 7: a request's events by type (its approvals, checked in the journal before it runs).
    """
    CREATE INDEX journal_request ON journal (request_id, type, seq);
    """,
    # 8: that index holds only the events of requests (a read's events have none).
    """
    DROP INDEX journal_request;
    CREATE INDEX journal_request ON journal (request_id, type, seq) WHERE request_id IS NOT NULL;
    """,
)

if len(MIGRATIONS) != len(SQLITE_MIGRATIONS):  # pragma: no cover - a programming error
    raise RuntimeError(f"PostgreSQL has {len(MIGRATIONS)} migrations, SQLite "
                       f"{len(SQLITE_MIGRATIONS)}: every schema change needs both dialects")
