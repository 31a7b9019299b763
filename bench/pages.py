"""Benchmark the leaderboard page, GET /, with 10,000 experiments stored.

    python bench/pages.py [--experiments 10000] [--requests 30]

A fresh project is made with the server's own `init_project` (SQLite, in a temporary folder),
then filled with experiments in bulk through the ORM: a night of research as the chart shows it
(kept ones improving the best step by step, most discarded, some crashed, a few running and
queued), each finished one with its lease and result row. The app runs in uvicorn on a free
local port, and GET / is timed over HTTP (median and p95) next to two references measured in the
same run: GET /api/v1/healthz (routing and a database ping: the floor) and GET
/api/v1/leaderboard (the JSON API's view of the same standings). GET / is measured three ways:
repeated (the chart comes from the page cache), right after each of 30 new results (the chart
reads the new rows and is redrawn) and with the cache emptied before each request (every row
read and drawn, as after a restart). Figures depend on the machine and on its load; compare the
ratios.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from fastapi import FastAPI
from sqlalchemy import update

from protocol.states import Decision, ExperimentStatus, RunState
from server.core.config import ServerSettings
from server.core.db import Database, create_db_engine
from server.main import create_app
from server.models import Experiment, Run
from server.pages.chart_cache import ChartCache
from server.project_init import init_project
from server.serving import served_in_thread
from testkit.seeded_history import HARNESS_ID, PLATFORM, seed_experiments


def new_project(data_dir: Path) -> ServerSettings:
    """A project as `autoresearch init` makes it, with its baseline measured at 1.0."""
    settings = ServerSettings(data_dir=data_dir, harness_id=HARNESS_ID, platform=PLATFORM)
    program_md = data_dir / "program.md"
    program_md.write_text("# Benchmark\n")
    baseline_id = init_project(settings, program_md=program_md)
    db = Database(create_db_engine(settings.resolved_database_url))
    with db.write() as session:
        baseline = session.get(Experiment, baseline_id)
        assert baseline is not None
        now = datetime.now(UTC) - timedelta(days=60)
        baseline.status, baseline.val_bpb, baseline.decision = ExperimentStatus.KEPT, 1.0, Decision.KEEP
        baseline.valid_runs, baseline.started_at, baseline.finished_at = 1, now, now
        session.execute(
            update(Run)
            .where(Run.experiment_id == baseline_id)
            .values(status=RunState.FINISHED, attempts=1, finished_at=now)
        )
    db.dispose()
    return settings


def timings(client: httpx.Client, path: str, requests: int) -> list[float]:
    """Milliseconds per request, after two warm-up requests (caches, first-use imports)."""
    for _ in range(2):
        client.get(path).raise_for_status()
    out = []
    for _ in range(requests):
        started = time.perf_counter()
        response = client.get(path)
        out.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
    return out


def timings_after_results(client: httpx.Client, db: Database, requests: int) -> list[float]:
    """Milliseconds of GET / right after a new result each time: the chart is redrawn every time."""
    out = []
    for n in range(requests):
        seed_experiments(db, 1, in_flight=0, seed=1000 + n)
        started = time.perf_counter()
        response = client.get("/")
        out.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
    return out


def timings_from_scratch(client: httpx.Client, app: FastAPI, requests: int) -> list[float]:
    """Milliseconds of GET / with an empty chart cache, as after a restart: every row read, all drawn."""
    out = []
    for _ in range(requests):
        app.state.pages_chart = ChartCache()
        started = time.perf_counter()
        response = client.get("/")
        out.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
    return out


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--experiments", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pages-") as tmp:
        settings = new_project(Path(tmp))
        db = Database(create_db_engine(settings.resolved_database_url))
        started = time.perf_counter()
        seed_experiments(db, args.experiments)
        print(f"seeded {args.experiments:,} experiments in {time.perf_counter() - started:.1f} s")
        app = create_app(settings)
        try:
            with served_in_thread(app) as url, httpx.Client(base_url=url, timeout=60) as client:
                size = len(client.get("/").content)
                results = {path: timings(client, path, args.requests)
                           for path in ("/", "/api/v1/healthz", "/api/v1/leaderboard")}  # fmt: skip
                results["/ after a new result"] = timings_after_results(client, db, args.requests)
                results["/ chart from scratch"] = timings_from_scratch(client, app, args.requests)
        finally:
            db.dispose()
    page = statistics.median(results["/"])
    print(
        f"GET / is {size / 1024:.0f} KiB with {args.experiments:,} experiments; {args.requests} requests each"
    )
    print(f"{'request':<28}{'median ms':>10}{'p95 ms':>10}{'median / GET /':>16}")
    for path, values in results.items():
        median = statistics.median(values)
        print(f"GET {path:<24}{median:>10.1f}{p95(values):>10.1f}{median / page:>16.2f}")
    reference = statistics.median(results["/api/v1/leaderboard"])
    redrawn = statistics.median(results["/ after a new result"])
    scratch = statistics.median(results["/ chart from scratch"])
    floor = statistics.median(results["/api/v1/healthz"])
    print(
        f"GET / takes {page / reference:.2f}x the JSON leaderboard ({redrawn / reference:.2f}x right after "
        f"a new result, {scratch / reference:.2f}x with the chart drawn from scratch) and "
        f"{page / floor:.1f}x the health check"
    )


if __name__ == "__main__":
    main()
