"""The SQLite store's schema: its migrations, applied in order by ``SqliteStore.migrate``
(``PRAGMA user_version`` counts those applied). The PostgreSQL store makes the same
changes, entry for entry, in its dialect (``_pg_schema.py``).
"""

from __future__ import annotations

__all__ = ["MIGRATIONS"]

#: Each entry moves the schema one version up. Never edit a released entry: append.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        created_at TEXT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE TABLE requests (
        id TEXT PRIMARY KEY,
        run_id TEXT NOT NULL,
        instrument TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        idempotency_key TEXT,
        version INTEGER NOT NULL,
        data TEXT NOT NULL,
        UNIQUE (run_id, idempotency_key)
    );
    CREATE INDEX requests_status ON requests (status, created_at);
    CREATE INDEX requests_run ON requests (run_id, created_at);
    CREATE TABLE journal (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        request_id TEXT,
        type TEXT NOT NULL,
        at TEXT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX journal_run ON journal (run_id, seq);
    CREATE TABLE setpoints (
        instrument TEXT NOT NULL,
        channel INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (instrument, channel)
    );
    CREATE TABLE kv (
        tbl TEXT NOT NULL,
        key TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (tbl, key)
    );
    """,
    # 2: who owns a run and whether it is closed, as columns (per-requester quotas count
    # them); the queue sorted by expiry.
    """
    ALTER TABLE runs ADD COLUMN principal TEXT;
    ALTER TABLE runs ADD COLUMN status TEXT;
    UPDATE runs SET principal = json_extract(data, '$.principal'),
                    status = json_extract(data, '$.status');
    CREATE INDEX runs_principal ON runs (principal, status);
    CREATE INDEX requests_expiry ON requests (status, expires_at);
    """,
    # 3: each request names its requester (its run's principal), so one requester's
    # pending requests are counted from an index, however many others wait.
    """
    ALTER TABLE requests ADD COLUMN requester TEXT;
    UPDATE requests SET requester = (SELECT principal FROM runs WHERE runs.id = requests.run_id);
    CREATE INDEX requests_requester ON requests (requester, status, expires_at);
    """,
    # 4: the journal's hash chain (bench_gate.store._chain): each event's prev-hash and
    # hash, and the archived segments. The store then chains the events it holds, in seq
    # order. (The head is the newest event, or segment, and AUTOINCREMENT's counter: no row
    # of its own to rewrite with every commit.)
    """
    ALTER TABLE journal ADD COLUMN prev TEXT;
    ALTER TABLE journal ADD COLUMN hash TEXT;
    CREATE TABLE journal_segments (
        first_seq INTEGER PRIMARY KEY,
        last_seq INTEGER NOT NULL,
        events INTEGER NOT NULL,
        prev TEXT NOT NULL,
        last_hash TEXT NOT NULL,
        path TEXT NOT NULL,
        archived_at TEXT NOT NULL
    );
    """,
    # 5: each request's list document beside it (listing.listed_document), so a page parses a
    # fraction of each request; a request saved before it is listed from its data.
    """
    ALTER TABLE requests ADD COLUMN listed TEXT;
    """,
    # 6: one index per sort holding its whole order (status, the sort's time, the id that
    # breaks ties: ``_queries._ORDER``), so a page is read in order instead of sorted in a
    # temporary B-tree; each also holds the list document, so a page reads the index alone
    # and never the request's row, whose whole document (read first, stored before the
    # list document) spills into overflow pages. They replace requests_expiry; the narrow
    # requests_status stays for a page's count (a tenth of the pages of a wide index).
    """
    CREATE INDEX requests_newest ON requests (status, created_at DESC, id, listed);
    CREATE INDEX requests_soonest ON requests (status, expires_at, id, listed);
    DROP INDEX requests_expiry;
    """,
    # 7: a request's events by type (its approvals, each checked in the journal before the
    # request runs: executor, rechecks.unjournaled).
    """
    CREATE INDEX journal_request ON journal (request_id, type, seq);
    """,
    # 8: that index holds only the events of requests. A read's events have none, and most
    # of the journal is reads: each was a B-tree entry written at every fold and never
    # looked up. ``request_id = ?`` implies the index's condition, so lookups still use it.
    """
    DROP INDEX journal_request;
    CREATE INDEX journal_request ON journal (request_id, type, seq) WHERE request_id IS NOT NULL;
    """,
)
