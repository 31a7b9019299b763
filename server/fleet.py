"""What lets one server process carry a fleet of a thousand workers (docs/benchmarks.md, "Fleet").

Progress pacing. Each running worker sends its progress every `progress_seconds`, which the
server puts in every claim and heartbeat answer: the workers online (seen within two lease
periods, as GET /metrics counts them) divided by FLEET_PROGRESS_PER_S, the progress requests a
second the whole fleet may send, and never less than a second. 50 workers report every second,
as they always did; 1000 every 20 s, as often as they heartbeat. At one second each, 1000
workers sent 1000 requests a second, more than the server answers (docs/benchmarks.md). The
count is refreshed in the background every few seconds, so a burst of claims (a server restart,
a queue filling up after a quiet night) is paced like the rest.

Idle long polls. A long-polling claim is woken by a "queued" event of this process, and also
looks at the queue once a second, for work queued another way (another process). A thousand
idle workers made that a thousand claims a second, and each new long poll a claim more. Now one
look a second, shared by all waiting claims, says whether anything is queued; while it says the
queue is empty and nothing was queued through this process since, a new long poll skips its
first claim too.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from sqlalchemy import select
from starlette.concurrency import run_in_threadpool

from client.states import RunState
from server.core.db import Database
from server.models import RUNS

log = logging.getLogger(__name__)

MIN_PROGRESS_SECONDS = 1.0  # what a worker sends at most: about once a second (worker/lease.py)
COUNT_SECONDS = 5.0  # how often the workers online are counted
QUEUE_LOOK_SECONDS = 1.0  # how long one look at the queue stands for all waiting claims


def progress_seconds(online: int, fleet_progress_per_s: float) -> float:
    """How often each of `online` workers sends progress so that all send at most the given rate.

    Rounded up to a tenth of a second, so that the answer reads well and the rate still holds.
    """
    return max(MIN_PROGRESS_SECONDS, math.ceil(online / fleet_progress_per_s * 10) / 10)


@dataclass
class Fleet:
    """The fleet's size and the shared look at the queue, for one server process (event loop only)."""

    fleet_progress_per_s: float
    clock: Callable[[], float] = time.monotonic
    online: int = 0
    _looked_at: float = -1e18
    _looked_queued_events: int = -1
    _queued: bool = False
    _look: asyncio.Future[bool] | None = field(default=None, repr=False)

    # Progress pacing ---------------------------------------------------------------------------

    def progress_seconds(self) -> float:
        return progress_seconds(self.online, self.fleet_progress_per_s)

    async def keep_counted(self, count: Callable[[], int]) -> None:
        """Count the workers online now and every COUNT_SECONDS (`count` runs in a thread)."""
        while True:
            try:
                self.online = await run_in_threadpool(count)
            except Exception:  # keep counting: a database hiccup must not freeze the pace for good
                log.exception("counting the workers online failed")
            await asyncio.sleep(COUNT_SECONDS)

    # Idle long polls ---------------------------------------------------------------------------

    def known_empty(self, queued_events: int) -> bool:
        """True when the last look (under a second ago) found no queued work and nothing was queued
        through this process since (`queued_events`: the bus's count of "queued" events)."""
        fresh = self.clock() - self._looked_at < QUEUE_LOOK_SECONDS
        return fresh and not self._queued and queued_events == self._looked_queued_events

    async def anything_queued(self, look: Callable[[], Awaitable[bool]], queued_events: int) -> bool:
        """Whether anything is queued, from `look()`, which runs at most once a second for all callers."""
        if self.clock() - self._looked_at < QUEUE_LOOK_SECONDS:
            return self._queued
        if self._look is None:
            self._look = asyncio.ensure_future(self._look_once(look, queued_events))
        # Shielded: a caller that goes away (its client hung up) does not cancel it for the others.
        return await asyncio.shield(self._look)

    async def _look_once(self, look: Callable[[], Awaitable[bool]], queued_events: int) -> bool:
        try:
            self._queued = await look()
            self._looked_at, self._looked_queued_events = self.clock(), queued_events
            return self._queued
        finally:
            self._look = None


def queue_not_empty(db: Database) -> bool:
    """Whether any run is queued (one row of the queue index)."""
    with db.read() as session:
        first = session.scalar(select(RUNS.c.id).where(RUNS.c.status == RunState.QUEUED).limit(1))
    return first is not None
