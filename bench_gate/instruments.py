"""Instruments: one serialized I/O lane per instrument over pyvisa.

pyvisa calls block, so each lane owns one worker thread and runs every job there, in order:
two commands never interleave on an instrument, and the event loop never blocks. pyvisa's
errors are translated to :class:`InstrumentError` here and nowhere else.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import pyvisa
import pyvisa.errors

from .config import InstrumentConfig
from .errors import InstrumentError

__all__ = ["Lane", "Link", "PyvisaLink"]

T = TypeVar("T")


class Link(Protocol):
    """The one-method-per-direction interface a lane drives."""

    def write(self, command: str) -> None: ...
    def query(self, command: str) -> str: ...
    def close(self) -> None: ...


class PyvisaLink:
    """A pyvisa message-based resource, opened lazily and reopened after an I/O error."""

    def __init__(self, config: InstrumentConfig) -> None:
        self.config = config
        self._rm: pyvisa.ResourceManager | None = None
        self._res: Any = None

    def _open(self) -> Any:
        if self._res is None:
            try:
                if self._rm is None:
                    self._rm = pyvisa.ResourceManager(self.config.backend)
                res: Any = self._rm.open_resource(self.config.resource)
                res.timeout = self.config.timeout_ms
                res.read_termination = self.config.read_termination
                res.write_termination = self.config.write_termination
            except (pyvisa.errors.Error, OSError, ValueError) as exc:
                # pyvisa shares one manager per backend in a process; if someone closed it,
                # a fresh one is needed on the next attempt.
                self._rm = None
                raise InstrumentError(
                    f"{self.config.name}: cannot open {self.config.resource}: {exc}"
                ) from exc
            self._res = res
        return self._res

    def _fail(self, what: str, exc: Exception) -> InstrumentError:
        self.close()  # reconnect on the next call
        kind = "timed out" if isinstance(exc, pyvisa.errors.VisaIOError) and \
            exc.error_code == pyvisa.constants.StatusCode.error_timeout else "failed"
        return InstrumentError(f"{self.config.name}: {what} {kind}: {exc}")

    def write(self, command: str) -> None:
        res = self._open()
        try:
            res.write(command)
        except (pyvisa.errors.Error, OSError) as exc:
            raise self._fail(f"write {command!r}", exc) from exc

    def query(self, command: str) -> str:
        res = self._open()
        try:
            return str(res.query(command)).strip()
        except (pyvisa.errors.Error, OSError, UnicodeDecodeError) as exc:
            raise self._fail(f"query {command!r}", exc) from exc

    def close(self) -> None:
        res, self._res = self._res, None
        if res is not None:
            try:
                res.close()
            except Exception:
                pass


class Lane:
    """The single serialized I/O path to one instrument."""

    def __init__(self, name: str, link: Link) -> None:
        self.name = name
        self.link = link
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"lane-{name}"
        )
        self._lock = threading.Lock()
        self.io_errors = 0

    async def run(self, job: Callable[[Link], T]) -> T:
        """Run ``job(link)`` on the lane's thread; jobs run one at a time, in order."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._guarded, job)

    def run_sync(self, job: Callable[[Link], T]) -> T:
        return self._pool.submit(self._guarded, job).result()

    def _guarded(self, job: Callable[[Link], T]) -> T:
        with self._lock:
            try:
                return job(self.link)
            except InstrumentError:
                self.io_errors += 1
                raise

    def close(self) -> None:
        self._pool.submit(self.link.close).result()
        self._pool.shutdown(wait=True)
