"""Web pages for humans: leaderboard and progress chart, experiments, agents, workers.

`server.main.create_app` calls `register(app)`. Everything a page needs (CSS, JavaScript, the
chart) is served by the app itself: the pages work offline, without any CDN.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from server.pages.chart_cache import ChartCache
from server.pages.routes import router
from server.pages.templating import STATIC_DIR


def register(app: FastAPI) -> None:
    app.state.pages_chart = ChartCache()
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
