"""Per-agent totals for the leaderboard, kept fresh in the background.

The totals are one aggregate over every experiment (tens of milliseconds at 100,000), so
requests read the last computed totals instead, and a background task recomputes them every
STANDINGS_REFRESH_SECONDS when something happened since (any published event). The per-agent
standing is therefore at most that many seconds old; the lineage, best results and best are
always read live.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from sqlalchemy import Row
from starlette.concurrency import run_in_threadpool

from server.context import AppContext
from server.crud.standings import agent_totals

log = logging.getLogger(__name__)


class TotalsCache:
    def __init__(self) -> None:
        self._totals: dict[int, Row[Any]] | None = None
        self._as_of_event = -1
        self._lock = threading.Lock()

    def current(self, ctx: AppContext) -> dict[int, Row[Any]]:
        totals = self._totals
        if totals is None:
            return self.refresh(ctx)
        return totals

    def refresh(self, ctx: AppContext) -> dict[int, Row[Any]]:
        with self._lock:
            as_of = ctx.bus.last_event_id
            with ctx.db.read() as session:
                self._totals = agent_totals(session)
            self._as_of_event = as_of
            return self._totals

    async def keep_fresh(self, ctx: AppContext) -> None:
        while True:
            await asyncio.sleep(ctx.settings.standings_refresh_seconds)
            if ctx.bus.last_event_id == self._as_of_event:
                continue
            try:
                await run_in_threadpool(self.refresh, ctx)
            except Exception:  # keep refreshing; one failed aggregate must not stop the task
                log.exception("recomputing the agent standings failed")
