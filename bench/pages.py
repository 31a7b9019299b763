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
import random
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from fastapi import FastAPI
from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from client.states import Decision, ExperimentStatus, RunKind, RunState
from server.core.config import ServerSettings
from server.core.db import Database, create_db_engine
from server.crud.project import load_project
from server.crud.tokens import create_token
from server.main import create_app
from server.models import ApiToken, Experiment, Lease, Result, Run, Worker
from server.pages.chart_cache import ChartCache
from server.project_init import init_project
from server.serving import served_in_thread

HARNESS_ID = "bench-harness"
PLATFORM = "bench-device"
IDEAS = (
    "double the matrix learning rate", "halve the warmdown", "wider MLP", "deeper by two layers",
    "remove the logit softcap", "sliding window on odd layers", "rope base 50000", "weight decay 0.1",
    "muon momentum 0.9", "embedding lr 0.8", "batch size x2", "shorter warmup", "tied embeddings",
    "value embeddings", "squared relu", "zero-init projections",
)  # fmt: skip


def _token_id(session: Session, kind: str, name: str) -> int:
    statement = select(ApiToken.id).where(ApiToken.kind == kind, ApiToken.name == name)
    if session.scalar(statement) is None:
        create_token(session, kind, name)
    return int(session.scalar(statement))  # type: ignore[arg-type]


def _worker_id(session: Session, start: datetime) -> str:
    token_id = _token_id(session, "worker", "bench-workers")
    existing = session.scalar(select(Worker.id).where(Worker.token_id == token_id))
    if existing is not None:
        return existing
    worker_id = str(uuid.uuid4())
    session.execute(
        insert(Worker),
        [{"id": worker_id, "token_id": token_id, "name": "gpu-0", "device": PLATFORM, "memory_gb": 80.0,
          "harness_id": HARNESS_ID, "registered_at": start, "last_seen_at": start}],
    )  # fmt: skip
    return worker_id


def seed_experiments(
    db: Database,
    count: int,
    *,
    in_flight: int = 4,
    agents: tuple[str, ...] = ("alice", "bob", "carol"),
    seed: int = 0,
) -> None:
    """Add `count` experiments, the newest `in_flight` of them running or queued, as agents made them.

    The baseline's commit stands in for every candidate's commit (the pages read commits only on
    an experiment's own page). The project's best becomes the last kept experiment. Can be called
    again to add more.
    """
    rng = random.Random(seed)
    with db.write() as session:
        project = load_project(session)
        baseline = session.scalars(select(Experiment).where(Experiment.base_commit.is_(None))).one()
        commit = baseline.commit_sha
        best_experiment = session.get(Experiment, project.best_experiment_id)
        best = best_experiment.val_bpb if best_experiment and best_experiment.val_bpb is not None else 1.0
        agent_ids = [_token_id(session, "agent", name) for name in agents]
        # After everything already there: the chart orders experiments by when they finished.
        latest = session.scalar(select(func.max(Experiment.created_at)))
        start = max(
            datetime.now(UTC) - timedelta(minutes=6 * count), latest or datetime.min.replace(tzinfo=UTC)
        )
        worker_id = _worker_id(session, start)
        first_id = int(session.scalar(select(func.max(Experiment.id))) or 0) + 1
        first_run_id = int(session.scalar(select(func.max(Run.id))) or 0) + 1
        experiments, runs, leases, results = [], [], [], []
        best_id = project.best_experiment_id
        for n in range(count):
            id_ = first_id + n
            created = start + timedelta(minutes=6 * n)
            if n >= count - in_flight:  # the newest few are still running or queued
                status, val_bpb, run_status = (
                    (ExperimentStatus.RUNNING if n == count - in_flight else ExperimentStatus.QUEUED),
                    None,
                    None,
                )
            else:
                status, val_bpb, run_status = _outcome(rng, best)
            finished = (
                created + timedelta(minutes=5, seconds=30)
                if run_status or status == ExperimentStatus.INFRA_FAILED
                else None
            )
            experiments.append(
                dict(
                    id=id_, agent_id=rng.choice(agent_ids), source="agent", base_commit=commit,
                    commit_sha=commit, description=f"{rng.choice(IDEAS)} (try {n})", status=status,
                    created_at=created, queued_at=created,
                    started_at=created + timedelta(seconds=20) if status != ExperimentStatus.QUEUED else None,
                    finished_at=finished, decision=DECISIONS.get(status),
                    decision_reason="seeded by bench/pages.py" if finished else None,
                    best_before_commit=commit if run_status else None,
                    best_before_val_bpb=best if run_status else None,
                    effect=val_bpb - best if val_bpb is not None else None,
                    compared_runs=1 if val_bpb is not None else None,
                    best_runs=1 if val_bpb is not None else None,
                    val_bpb=val_bpb, valid_runs=1 if val_bpb is not None else 0, val_bpb_m2=0.0,
                    platform=PLATFORM if run_status else None,
                )
            )  # fmt: skip
            run_state = {ExperimentStatus.QUEUED: RunState.QUEUED, ExperimentStatus.RUNNING: RunState.RUNNING}
            runs.append(
                dict(
                    id=first_run_id + n, experiment_id=id_, number=1, seed=n, kind=RunKind.FIRST,
                    status=run_state.get(status, RunState.FINISHED if run_status else RunState.INFRA_FAILED),
                    attempts=1, queued_at=created, started_at=experiments[-1]["started_at"],
                    finished_at=finished,
                )
            )  # fmt: skip
            if run_status is not None and finished is not None:
                lease_id = str(uuid.uuid4())
                leases.append(
                    dict(
                        id=lease_id, experiment_id=id_, run_id=first_run_id + n, worker_id=worker_id,
                        attempt=1, state="finished",
                        claimed_at=created, expires_at=finished, ended_at=finished,
                    )
                )  # fmt: skip
                results.append(
                    dict(
                        id=str(uuid.uuid4()), experiment_id=id_, run_id=first_run_id + n, lease_id=lease_id,
                        worker_id=worker_id, seed=n,
                        received_at=finished, status=run_status, val_bpb=val_bpb,
                        error_class="train_error" if run_status == "crash" else None,
                        training_seconds=300.0, total_seconds=330.0, peak_memory_mb=44_000.0,
                        tokens=500_000_000, steps=950, num_params=50_000_000, mfu_percent=40.0,
                        device=PLATFORM, harness_id=HARNESS_ID, sandbox=True, log_tail="",
                    )
                )  # fmt: skip
            if status == ExperimentStatus.KEPT and val_bpb is not None:
                best, best_id = val_bpb, id_
        session.execute(insert(Experiment), experiments)
        session.execute(insert(Run), runs)
        if leases:
            session.execute(insert(Lease), leases)
            session.execute(insert(Result), results)
        project.best_experiment_id = best_id


DECISIONS = {ExperimentStatus.KEPT: Decision.KEEP, ExperimentStatus.REVERTED: Decision.REVERT}


def _outcome(rng: random.Random, best: float) -> tuple[ExperimentStatus, float | None, str | None]:
    """Status, val_bpb and run status of one finished experiment: mostly worse than the best.

    Keeps gain less and less as the best nears a floor of 0.8, as a long night of research does.
    """
    roll = rng.random()
    if roll < 0.05:
        return ExperimentStatus.KEPT, best - 0.0006 - (best - 0.8) * rng.uniform(0.0, 0.03), "ok"
    if roll < 0.13:
        return ExperimentStatus.REVERTED, None, "crash"
    if roll < 0.15:
        return ExperimentStatus.INFRA_FAILED, None, None
    return ExperimentStatus.REVERTED, best + abs(rng.gauss(0.004, 0.006)), "ok"


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
