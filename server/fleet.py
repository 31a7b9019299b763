"""What lets one server process carry a fleet of a thousand workers (docs/benchmarks.md, "Fleet").

Progress pacing. Each running worker sends its progress every `progress_seconds`, which the
server puts in every claim and heartbeat answer: the number of running workers divided by
FLEET_PROGRESS_PER_S (the progress requests a second the whole fleet may send), and never less
than a second. 50 workers report every second, as they always did; 1000 every 20 s, like their
heartbeats. At one second each, 1000 workers sent 1000 requests a second, more than the server
can answer (its latencies grew to tens of seconds and leases expired: docs/benchmarks.md).

Running workers are counted here, in memory, from the lease calls the server answers: a lease
counts from its claim until its result or release, or until it has not been heard from for a
lease period (then it has expired anyway). No database query is involved.

Idle long polls. A long-polling claim is woken by a "queued" event of this process, and also
looks at the queue once a second, for work queued another way (another process, lease expiry
found late). A thousand idle workers used to make that a thousand claims a second; now one query
a second, shared by all waiting claims, says whether anything is queued at all.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from sqlalchemy import select

from server.core.db import Database
from server.models import EXPERIMENTS, QUEUED

MIN_PROGRESS_SECONDS = 1.0  # what a worker sends at most: about once a second (worker/lease.py)
QUEUE_CHECK_SECONDS = 1.0


def progress_seconds(running: int, fleet_progress_per_s: float) -> float:
    """How often each of `running` workers sends progress so that all send at most the given rate.

    Rounded up to a tenth of a second, so that the answer reads well and the rate still holds.
    """
    return max(MIN_PROGRESS_SECONDS, math.ceil(running / fleet_progress_per_s * 10) / 10)


@dataclass
class Fleet:
    """The running leases (in memory) and the shared look at the queue, for one server process."""

    lease_seconds: float
    fleet_progress_per_s: float
    clock: Callable[[], float] = time.monotonic
    _seen: dict[str, float] = field(default_factory=dict)  # lease id -> when it was last heard from
    _pruned_at: float = 0.0
    _queue_checked_at: float = -1e18
    _queued: bool = False
    _queue_check: asyncio.Future[bool] | None = None

    # Progress pacing (called on the event loop only) ------------------------------------------

    def lease_heard(self, lease_id: str) -> float:
        """Note a call on this lease; the progress interval for its worker."""
        now = self.clock()
        self._seen[lease_id] = now
        if now - self._pruned_at > self.lease_seconds / 10:
            self._pruned_at = now
            for stale in [lease for lease, seen in self._seen.items() if now - seen > self.lease_seconds]:
                del self._seen[stale]
        return progress_seconds(len(self._seen), self.fleet_progress_per_s)

    def lease_ended(self, lease_id: str) -> None:
        self._seen.pop(lease_id, None)

    @property
    def running(self) -> int:
        return len(self._seen)

    # Idle long polls ---------------------------------------------------------------------------

    async def anything_queued(self, look: Callable[[], Awaitable[bool]]) -> bool:
        """Whether anything is queued, from `look()`, which runs at most once a second for all callers."""
        if self.clock() - self._queue_checked_at < QUEUE_CHECK_SECONDS:
            return self._queued
        if self._queue_check is None:
            self._queue_check = asyncio.ensure_future(self._look(look))
        # Shielded: a caller that goes away (its client hung up) does not cancel it for the others.
        return await asyncio.shield(self._queue_check)

    async def _look(self, look: Callable[[], Awaitable[bool]]) -> bool:
        try:
            self._queued = await look()
            self._queue_checked_at = self.clock()
            return self._queued
        finally:
            self._queue_check = None


def queue_not_empty(db: Database) -> bool:
    """Whether any experiment is queued (one row of the queue index)."""
    with db.read() as session:
        return (
            session.scalar(select(EXPERIMENTS.c.id).where(EXPERIMENTS.c.status == QUEUED).limit(1))
            is not None
        )
