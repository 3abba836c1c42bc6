"""Where runs, requests, approvals and the journal are kept."""

from pathlib import Path

from ._base import Store
from ._sqlite import MIGRATIONS, SqliteStore

__all__ = ["MIGRATIONS", "SqliteStore", "Store", "open_store"]


def open_store(url: str | Path) -> SqliteStore:
    """Open a store by path (SQLite file) or ``sqlite:///path`` URL."""
    text = str(url)
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///"):]
    return SqliteStore(text)
