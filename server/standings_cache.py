"""Per-agent totals of each track for the leaderboard, kept fresh in the background.

The totals are one aggregate over every experiment (tens of milliseconds at 100,000), so
requests read the last computed totals instead, and a background task (server/main.py)
recomputes them every STANDINGS_REFRESH_SECONDS when something happened since (any published
event). The per-agent standing is therefore at most that many seconds old; the lineage, best
results and best are always read live.
"""

from __future__ import annotations

import threading

from server.core.db import Database
from server.crud.standings import agent_totals
from server.models import AnyRow


class TotalsCache:
    def __init__(self) -> None:
        self._totals: dict[tuple[int, int], AnyRow] | None = None
        self._lock = threading.Lock()

    def current(self, db: Database) -> dict[tuple[int, int], AnyRow]:
        totals = self._totals
        if totals is None:
            return self.refresh(db)
        return totals

    def refresh(self, db: Database) -> dict[tuple[int, int], AnyRow]:
        with self._lock:
            with db.read() as session:
                self._totals = agent_totals(session)
            return self._totals
