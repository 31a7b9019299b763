"""Benchmark keep rates and near misses with thousands of decided experiments.

    python -m bench.history [--experiments 2000] [--commits 100] [--requests 20]

A fresh project (SQLite) is filled as bench/pages.py fills it, then each decided experiment is
given one of `--commits` real changes of the baseline train.py (the random agent's mutations,
one or two constants each, committed to the research repo) with its stored summary (each change
is summarised once, timed: diffing every experiment on every request would cost that many times
the experiments) and, for the reverted ones, a standard error, so that some are near misses.
The app then runs in uvicorn and GET /api/v1/keep-rates, GET /api/v1/near-misses, GET / (which
lists near misses) and, as the reference measured in the same run, GET /api/v1/leaderboard are
timed over HTTP, repeated (both from their caches) and fresh, as right after a new decision (keep
rates computed again; every near miss found again and its diff applied to the best again).
Figures depend on the machine and its load; compare the ratios.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from sqlalchemy import insert, select, update

from agent.mutation import mutate_constants
from bench.pages import new_project, p95, seed_experiments, timings
from server import history
from server.core.db import Database, create_db_engine
from server.crud import change_kinds
from server.main import create_app
from server.models import CHANGE_KINDS, Experiment
from server.serving import served_in_thread
from server.trainpy.changes import summarize
from server.trainpy.research_repo import ResearchRepo


def give_real_changes(db: Database, repo: ResearchRepo, commits: int, seed: int = 0) -> list[float]:
    """Point every seeded experiment at one of `commits` real changes of the baseline, store their
    kinds as the server's keep-rate sweep does (each change summarised once: the milliseconds each
    took are returned), and give the reverted ones a standard error (as two runs against two of the best's
    would have, sigma 0.002)."""
    rng = random.Random(seed)
    with db.write() as session:
        baseline = session.scalars(select(Experiment).where(Experiment.base_commit.is_(None))).one()
        source = repo.train_py(baseline.commit_sha).decode()
        changes = []
        for _ in range(commits):
            new, description = mutate_constants(source, rng)
            commit = repo.commit_candidate(baseline.commit_sha, new.encode(), description, "bench")
            started = time.perf_counter()
            summary = summarize(source, new)
            changes.append((commit, summary, (time.perf_counter() - started) * 1000))
        rows = []
        decided = session.scalars(select(Experiment).where(Experiment.base_commit.is_not(None))).all()
        for experiment in decided:
            commit, summary, _ = rng.choice(changes)
            experiment.commit_sha = commit
            if experiment.decision is not None:
                experiment.changes_parsed = summary.parsed
                rows += change_kinds.rows_of(experiment.id, summary)
        session.flush()
        session.execute(insert(CHANGE_KINDS), rows)
        session.execute(
            update(Experiment)
            .where(Experiment.effect.is_not(None))
            .values(effect_se=0.002, compared_runs=2, best_runs=2)
        )
    return [ms for _, _, ms in changes]


def forget_near_misses() -> None:
    history.NEAR_MISSES.clear()
    history.applies_to.cache_clear()


def timings_after(
    client: httpx.Client, path: str, requests: int, before: Callable[[], object]
) -> list[float]:
    """Milliseconds per request, each right after `before()` (emptying a cache)."""
    out = []
    for _ in range(requests):
        before()
        started = time.perf_counter()
        client.get(path).raise_for_status()
        out.append((time.perf_counter() - started) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--experiments", type=int, default=2000)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        settings = new_project(Path(tmp))
        db = Database(create_db_engine(settings.resolved_database_url))
        repo = ResearchRepo(settings.resolved_research_repo)
        seed_experiments(db, args.experiments)
        summaries_ms = give_real_changes(db, repo, args.commits)
        repo.close()
        db.dispose()
        app = create_app(settings)
        with served_in_thread(app) as url, httpx.Client(base_url=url, timeout=120) as client:
            rates = client.get("/api/v1/keep-rates").json()
            near = client.get("/api/v1/near-misses").json()
            paths = ("/api/v1/leaderboard", "/api/v1/keep-rates", "/api/v1/near-misses", "/")
            results = {path: timings(client, path, args.requests) for path in paths}
            # As after a new decision: keep rates computed again, near misses' diffs redone.
            results["/api/v1/keep-rates, recomputed"] = timings_after(
                client, "/api/v1/keep-rates", args.requests, history.KEEP_RATES.clear
            )
            results["/api/v1/near-misses, fresh"] = timings_after(
                client, "/api/v1/near-misses", args.requests, forget_near_misses
            )
    reference = statistics.median(results["/api/v1/leaderboard"])
    print(
        f"{args.experiments:,} experiments, {rates['overall']['tried']:,} decided and counted, "
        f"{rates['kinds_total']} kinds of change, {len(near['items'])} near misses listed; "
        f"{args.requests} requests each"
    )
    per = statistics.median(summaries_ms)
    every = per * rates["overall"]["tried"]
    print(
        f"summarising a change: {per:.1f} ms (median of {len(summaries_ms)}, worst {max(summaries_ms):.1f})"
    )
    print(f"{'request':<40}{'median ms':>10}{'p95 ms':>10}{'/ leaderboard':>15}")
    for path, values in results.items():
        median = statistics.median(values)
        print(f"GET {path:<36}{median:>10.1f}{p95(values):>10.1f}{median / reference:>15.2f}")
    stored = statistics.median(results["/api/v1/keep-rates, recomputed"])
    print(
        f"diffing every counted change on each request would take about {every / 1000:.1f} s, "
        f"{every / stored:.0f}x GET /keep-rates recomputed from storage"
    )


if __name__ == "__main__":
    main()
