"""What every request handler works with: settings, database, research repo and event bus.

`ctx.transaction()` is the one way to change state: a database write transaction that, when it
commits, publishes the events collected in it, and when it fails, undoes the git ref changes made
in it (refs are written inside the transaction, so a failed commit must not leave them behind).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio.to_thread
from anyio import CapacityLimiter
from cachetools import TTLCache
from prometheus_client import Histogram

from server.core.config import ServerSettings
from server.core.db import Database
from server.core.rate_limit import PerCallerLimit
from server.crud.tokens import Principal
from server.events import Broadcaster
from server.fleet import Fleet
from server.presence import Presence
from server.standings_cache import TotalsCache
from server.trainpy.research_repo import ResearchRepo
from server.transaction import Transaction

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class AppContext:
    settings: ServerSettings
    db: Database
    repo: ResearchRepo
    bus: Broadcaster
    presence: Presence
    # Token hash -> caller, for TOKEN_CACHE_SECONDS: a revoked token stops working within that time.
    # Used on the event loop only (the auth dependencies are async), so it needs no lock.
    principals: TTLCache[str, Principal]
    totals: TotalsCache
    request_times: Histogram
    fleet: Fleet
    note_limit: PerCallerLimit
    # The tracks whose best is measured (a valid run, and the noise estimate under the noise-aware
    # rule); a measurement is never lost, so claims then skip the check (server/flows/leases.py, gates).
    gate_open: set[int] = field(default_factory=set)
    # Counts the admin's changes of the tracks (created, archived): the tracks each worker serves
    # are computed again after one (server/flows/workers.py, serving).
    tracks_version: int = 0
    _tracks_lock: threading.Lock = field(default_factory=threading.Lock)
    _worker_threads: CapacityLimiter | None = None

    async def in_worker_thread(self, work: Callable[..., T], *args: Any) -> T:
        """Run a worker endpoint's database work in a thread, at most WORKER_DB_THREADS at a time.

        What a fleet calls most gets a small pool of its own. With one thread per concurrent call
        (the default pool has 40), the threads mostly contend for the GIL, and a few cost less CPU
        per claim-and-report cycle (docs/benchmarks.md has the figures).
        """
        if self._worker_threads is None:  # made on the event loop, which anyio needs
            self._worker_threads = CapacityLimiter(self.settings.worker_db_threads)
        return await anyio.to_thread.run_sync(work, *args, limiter=self._worker_threads)

    def tracks_changed(self) -> None:
        """A track was created or archived (after its transaction committed)."""
        with self._tracks_lock:
            self.tracks_version += 1

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        tx: Transaction | None = None
        try:
            with self.db.write() as session:
                tx = Transaction(session)
                yield tx
        except BaseException:
            for action in reversed(tx.undo if tx else []):
                try:
                    action()
                except Exception:  # keep undoing the rest; the original error is what matters
                    log.exception("undoing a git change after a failed transaction failed")
            raise
        self.bus.publish(tx.events)
