"""In-process knowledge about workers that saves a database round trip on every worker call.

A worker's owning token never changes, so it is cached (with the worker's name, for events)
after the first lookup. The tracks it serves are cached with the version of the tracks they were
computed for (`AppContext.tracks_version`): a track created or archived makes them computed
again. `last_seen_at` (for "workers online") is written at most every `write_every_s` per worker
instead of on every heartbeat, claim or progress call.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Serving:
    """The tracks a worker serves: their ids (for the claim) and names (for waking it)."""

    ids: tuple[int, ...]
    names: frozenset[str]


@dataclass
class Presence:
    write_every_s: float
    _owners: dict[str, tuple[int, str]] = field(default_factory=dict)
    _written: dict[str, float] = field(default_factory=dict)
    _tracks: dict[str, tuple[int, Serving]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def owner(self, worker_id: str) -> int | None:
        known = self._owners.get(worker_id)
        return known[0] if known else None

    def name(self, worker_id: str) -> str:
        known = self._owners.get(worker_id)
        return known[1] if known else worker_id

    def remember(self, worker_id: str, token_id: int, name: str) -> None:
        self._owners[worker_id] = (token_id, name)

    def serving(self, worker_id: str, version: int) -> Serving | None:
        """The tracks the worker serves, if known for this version of the tracks."""
        known = self._tracks.get(worker_id)
        return known[1] if known is not None and known[0] == version else None

    def serve(self, worker_id: str, version: int, serving: Serving) -> None:
        self._tracks[worker_id] = (version, serving)

    def seen_write_due(self, worker_id: str) -> bool:
        """True (and counted as written) when this worker's last_seen_at should be written now."""
        now = time.monotonic()
        with self._lock:
            if now - self._written.get(worker_id, -1e18) < self.write_every_s:
                return False
            self._written[worker_id] = now
            return True
