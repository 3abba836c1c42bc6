"""Where runs, requests, approvals and the journal are kept."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ._audit import archive, default_archive_dir, export_run, verify_file, verify_store
from ._base import LISTED_HANDOFF, PendingCheck, RequestPage, RequestSort, Store
from ._chain import GENESIS, Segment, canonical_at, canonical_data, intact, link
from ._readlog import READ_LOG_TABLE, ReadLog, ReadTemplate, flat_data, rows_of
from ._readlog import Row as ReadRow
from ._readlog import row as read_row
from ._sqlite import MIGRATIONS, SqliteStore
from ._walk import ChainReport, Problem

if TYPE_CHECKING:
    from ._postgres import MIGRATIONS as POSTGRES_MIGRATIONS
    from ._postgres import PostgresStore

__all__ = ["GENESIS", "LISTED_HANDOFF", "MIGRATIONS", "POSTGRES_MIGRATIONS", "READ_LOG_TABLE",
           "ChainReport", "PendingCheck", "PostgresStore", "Problem", "ReadLog", "ReadRow",
           "ReadTemplate", "RequestPage", "RequestSort", "Segment", "SqliteStore", "Store",
           "archive", "canonical_at", "canonical_data", "default_archive_dir", "export_run",
           "flat_data", "intact", "link", "open_store", "read_row", "rows_of", "verify_file",
           "verify_store"]

#: URL schemes that select the PostgreSQL store (libpq accepts both).
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def open_store(url: str | Path) -> SqliteStore | PostgresStore:
    """Open a store by URL: ``postgresql://user@host:port/dbname`` (PostgreSQL),
    ``sqlite:///path`` or a plain path (an SQLite file)."""
    text = str(url)
    if text.startswith(POSTGRES_SCHEMES):
        from ._postgres import PostgresStore

        return PostgresStore(text)
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///"):]
    return SqliteStore(text)


def __getattr__(name: str) -> object:
    # The PostgreSQL names are imported on first use, so SQLite users never load psycopg.
    if name == "PostgresStore":
        from ._postgres import PostgresStore

        return PostgresStore
    if name == "POSTGRES_MIGRATIONS":
        from ._postgres import MIGRATIONS

        return MIGRATIONS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
