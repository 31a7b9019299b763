"""Per-caller rate limits (pyrate-limiter's sliding-window log, in memory).

In memory is enough: one server process serves a project (server/main.py), and a restart that
forgets the last minute's posts costs nothing worth a table.
"""

from __future__ import annotations

import math
import threading
import time

from pyrate_limiter import InMemoryBucket, Rate, RateItem


class PerCallerLimit:
    """At most `limit` events per `window_s` seconds for each caller."""

    def __init__(self, limit: int, window_s: float) -> None:
        self.rate = Rate(limit, int(window_s * 1000))
        self.buckets: dict[int, InMemoryBucket] = {}
        self.lock = threading.Lock()

    def wait_s(self, caller: int) -> float | None:
        """Count one event for `caller`: None when allowed, else the seconds until one would be."""
        with self.lock:
            bucket = self.buckets.setdefault(caller, InMemoryBucket([self.rate]))
        item = RateItem(str(caller), int(time.time() * 1000))
        if bucket.put(item):
            return None
        waiting = bucket.waiting(item)
        assert isinstance(waiting, int)  # an in-memory bucket answers at once
        return max(waiting, 0) / 1000


def retry_after(seconds: float) -> str:
    """A Retry-After header value: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))
