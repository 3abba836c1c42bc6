"""A throwaway PostgreSQL cluster for tests, from Debian's binaries.

``pg_cluster`` (session-scoped) finds ``/usr/lib/postgresql/*/bin/initdb`` and ``pg_ctl`` (or
the directory in ``$PG_BIN``), creates a cluster in a temporary directory, starts it on a free
127.0.0.1 port with trust authentication, and stops and deletes it after the session. As root
the cluster runs as the ``postgres`` user (initdb refuses root). Without PostgreSQL the tests
that need it are skipped, unless ``$CI`` is set: in CI a missing PostgreSQL is a failure.

Use it from a test module with ``pg_cluster = pg.pg_cluster`` (module-level), or start one
yourself: ``with PgCluster.create() as cluster: cluster.new_database()``.

``execute_raw(store, sql, params)`` runs one statement on a store's database over a
connection of its own, as another program (or an older gateway) would write it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
import pytest

__all__ = ["PgCluster", "execute_raw", "find_bin", "pg_cluster"]

RUN_AS = "postgres"


def find_bin() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: ``$PG_BIN``, else the newest
    ``/usr/lib/postgresql/<major>/bin``, else ``$PATH``."""
    if env := os.environ.get("PG_BIN"):
        return Path(env) if (Path(env) / "initdb").exists() else None
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name)
                   if Path(p).parent.parent.name.isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(initdb).parent
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgCluster:
    """One initdb'd data directory and its server on 127.0.0.1:``port``."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.as_root = os.geteuid() == 0
        # Not pytest's tmp_path: its parents are 0700 root, which the postgres user cannot cross.
        self.root = Path(tempfile.mkdtemp(prefix="bench-gate-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self.running = False
        if self.as_root:
            try:
                user = pwd.getpwnam(RUN_AS)
            except KeyError as exc:
                raise RuntimeError(f"running as root, and there is no {RUN_AS!r} user to run "
                                   "PostgreSQL as (initdb refuses root)") from exc
            os.chown(self.root, user.pw_uid, user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "-E", "UTF8", "--no-locale", "--no-sync")

    @classmethod
    def create(cls) -> PgCluster:
        bindir = find_bin()
        if bindir is None:
            raise FileNotFoundError("no PostgreSQL binaries (initdb, pg_ctl)")
        cluster = cls(bindir)
        try:
            cluster.start()
        except BaseException:
            cluster.destroy()
            raise
        return cluster

    def _run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / tool), *args]
        if self.as_root:
            cmd = ["runuser", "-u", RUN_AS, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr.strip()}\n{log}")
        return done

    @property
    def url(self) -> str:
        return self.url_for("postgres")

    def url_for(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> None:
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} "
                   "-c fsync=off -c full_page_writes=off -c max_connections=200")
        self._run("pg_ctl", "start", "-D", str(self.data), "-l", str(self.log), "-w",
                  "-t", "30", "-o", options)
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        """Stop the server; ``mode="immediate"`` is a crash (recovery from WAL on start)."""
        if self.running:
            self._run("pg_ctl", "stop", "-D", str(self.data), "-m", mode, "-w", "-t", "30")
            self.running = False

    def new_database(self) -> str:
        """Create an empty database and return its URL."""
        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
            # FILE_COPY (PostgreSQL 15+) is much quicker than WAL_LOG for a tiny database.
            fast = " STRATEGY = FILE_COPY" if conn.info.server_version >= 150000 else ""
            conn.execute(f'CREATE DATABASE "{name}"{fast}'.encode())
        return self.url_for(name)

    def destroy(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PgCluster:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.destroy()


def start_or_skip() -> PgCluster:
    """A started cluster; without PostgreSQL, skip (fail when ``$CI`` is set)."""
    if find_bin() is None:
        message = ("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb; "
                   "apt-get install postgresql, or set PG_BIN)")
        if os.environ.get("CI"):
            pytest.fail(f"CI={os.environ['CI']}: {message}")
        pytest.skip(message)
    return PgCluster.create()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    with start_or_skip() as cluster:
        yield cluster


def execute_raw(store: Any, sql: str, params: tuple[Any, ...] = ()) -> None:
    """Run one statement (``?`` placeholders) on the database behind ``store`` (a
    ``SqliteStore`` by its ``path``, a ``PostgresStore`` by its ``url``), committed, over a
    connection of its own: the store's code is not involved."""
    url = getattr(store, "url", None)
    if url is None:
        with sqlite3.connect(store.path) as cx:
            cx.execute(sql, params)
        cx.close()
    else:
        with psycopg.connect(url) as pcx:
            pcx.execute(sql.replace("?", "%s"), params)
