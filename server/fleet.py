"""What lets one server process carry a fleet of a thousand workers (docs/benchmarks.md, "Fleet").

Progress pacing. Each running worker sends its progress every `progress_seconds`, which the
server puts in every claim and heartbeat answer: the workers online (seen within two lease
periods, as GET /metrics counts them) divided by FLEET_PROGRESS_PER_S, the progress requests a
second the whole fleet may send, and never less than a second. 50 workers report every second,
as they always did; 1000 every 20 s, as often as they heartbeat. At one second each, 1000
workers sent 1000 requests a second, more than the server answers (docs/benchmarks.md). The
count is refreshed in the background every few seconds, so a burst of claims (a server restart,
a queue filling up after a quiet night) is paced like the rest.

Idle long polls. A long-polling claim sleeps until its own deadline or a wakeup. A "queued"
event of this process wakes the claim that waited longest among the workers that serve the
event's track (one experiment, one worker). Work queued another way (another server process, a
direct insert) is seen by one look at the queue a second, made in the background while claims
wait, which wakes as many claims of each track's workers as runs are queued on it. While that
look found the worker's tracks' queues empty and nothing was queued through this process since, a
new long poll skips its first claim too. Each waiting claim used to wake itself once a second: first
to claim (a thousand idle workers made a thousand claims a second), later to read a shared look;
with a timer, a future and an O(n) removal each, that still cost the event loop several times
what one timer a long poll does (docs/benchmarks.md, "Fleet").

The larger cost was timing. A fleet that starts together (a server restart, a Slurm job array,
bench/fleet.py) long-polls in step, each worker polling again as soon as its 204 comes: a thousand
deadlines fell in the same slot, and the answers, each with the request that follows, came far too
late while GET /healthz waited behind them (docs/benchmarks.md, "Fleet"). Now each long poll ends
in the last tenth of its wait, never after it, in the 10 ms slot where the fewest other long polls
end: a thousand from one instant end 20 to each slot, their next ones spread over a second, the
next over a second and a half, and once the fleet is spread out each poll ends near its full wait.
A random moment of that tenth was not enough: the fleet drifts apart only as fast as a sum of
random draws spreads, so a thousand answers still came close together. docs/benchmarks.md,
"Fleet", has the figures.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field

from starlette.concurrency import run_in_threadpool

from server.core.db import Database
from server.crud.runs import queued_by_track
from server.events import Broadcaster

log = logging.getLogger(__name__)

MIN_PROGRESS_SECONDS = 1.0  # what a worker sends at most: about once a second (worker/lease.py)
COUNT_SECONDS = 5.0  # how often the workers online are counted
QUEUE_LOOK_SECONDS = 1.0  # how often one look at the queue serves all waiting claims
# A look stands until the next one is due and done: work queued after it wakes the claims then.
LOOK_FRESH_SECONDS = 2 * QUEUE_LOOK_SECONDS
LONG_POLL_SPREAD = 0.1  # a long poll ends in the last tenth of its wait
SLOT_SECONDS = 0.01  # the long polls ending are counted by 10 ms
ANY_TRACK = None  # runs a look counted without their tracks: any worker may take them
# One look at the queue: runs queued by track, up to a limit each (or a number: on any track).
QueueCount = Callable[[int], Awaitable[int | Mapping[str | None, int]]]


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
    draw: Callable[[], float] = random.random  # in [0, 1): picks among equal choices
    online: int = 0
    _looked_at: float = -1e18
    _looked_queued_events: int = -1
    # The tracks the last look found runs queued on (ANY_TRACK: runs whose track it did not say).
    _queued: frozenset[str | None] = frozenset()
    _ends: Counter[int] = field(default_factory=Counter)  # long polls waiting, by the slot they end in

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

    def start_long_poll(self, wait_s: float) -> tuple[float, int]:
        """The deadline of a long poll of `wait_s` seconds from now, and its slot (`quietest_slot`):
        in the last LONG_POLL_SPREAD of the wait, never after it. Call `end_long_poll` when it ends."""
        now = self.clock()
        earliest, latest = now + (1 - LONG_POLL_SPREAD) * wait_s, now + wait_s
        first = math.ceil(earliest / SLOT_SECONDS)
        last = math.floor(latest / SLOT_SECONDS) - 1
        slot = quietest_slot(self._ends, first, max(first, last), self.draw())
        self._ends[slot] += 1
        return min(latest, max(earliest, (slot + self.draw()) * SLOT_SECONDS)), slot

    def end_long_poll(self, slot: int) -> None:
        self._ends[slot] -= 1
        if not self._ends[slot]:
            del self._ends[slot]

    def known_empty(self, queued_events: int, tracks: Collection[str] | None = None) -> bool:
        """True when the last look (a fresh one) found no queued work on these tracks (None: on
        any) and nothing was queued through this process since (`queued_events`: the bus's count
        of "queued" events)."""
        fresh = self.clock() - self._looked_at < LOOK_FRESH_SECONDS
        if not fresh or queued_events != self._looked_queued_events:
            return False
        return not self._queued if tracks is None else self._queued.isdisjoint({ANY_TRACK, *tracks})

    async def keep_looking(self, count_queued: QueueCount, bus: Broadcaster) -> None:
        """While claims wait, look at the queue every QUEUE_LOOK_SECONDS (`look_once`)."""
        while True:
            await asyncio.sleep(QUEUE_LOOK_SECONDS)
            if not bus.claims_waiting:
                continue
            try:
                await self.look_once(count_queued, bus)
            except Exception:  # keep looking: a database hiccup must not leave the claims asleep
                log.exception("looking at the queue failed")

    async def look_once(self, count_queued: QueueCount, bus: Broadcaster) -> None:
        """Wake as many waiting claims of each track's workers as runs are queued on it
        (`count_queued(n)`: how many by track, up to n each; a plain number: on any track)."""
        looked_at, queued_events = self.clock(), bus.queued_events
        counted = await count_queued(bus.claims_waiting)
        queued: dict[str | None, int] = {ANY_TRACK: counted} if isinstance(counted, int) else dict(counted)
        self._looked_at, self._looked_queued_events = looked_at, queued_events
        self._queued = frozenset(track for track, count in queued.items() if count)
        bus.wake_by_track(queued)


def quietest_slot(ends: Mapping[int, int], first: int, last: int, draw: float) -> int:
    """The slot from `first` to `last` in which the fewest long polls end (`ends`: how many, by
    slot); among equals, the one `draw` (0..1) picks."""
    counts = [ends.get(slot, 0) for slot in range(first, last + 1)]
    fewest = min(counts)
    quietest = [first + index for index, count in enumerate(counts) if count == fewest]
    return quietest[int(draw * len(quietest))]


def queued_runs(db: Database, limit: int) -> dict[str | None, int]:
    """How many runs are queued on each track not archived, counting at most `limit` of each."""
    with db.read() as session:
        return {name: queued for name, queued in queued_by_track(session, limit).items()}
