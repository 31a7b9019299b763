"""Prometheus metrics, computed from the database at scrape time (exposition format 0.0.4).

Computing at scrape time keeps the numbers right across restarts and with several readers of
one database; each scrape is a handful of indexed aggregate queries.
"""

from __future__ import annotations

from sqlalchemy import case, func, select

from client.states import FINAL_STATUSES, ExperimentStatus, RunState
from server.context import AppContext
from server.crud.workers import online_count
from server.models import Experiment, Result, Run

DURATION_BUCKETS = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 3600.0)


def _family(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{labels} {value:g}" for labels, value in samples]
    return lines


def render_metrics(ctx: AppContext) -> str:
    with ctx.db.read() as session:
        by_status = dict(
            session.execute(select(Experiment.status, func.count()).group_by(Experiment.status)).all()
        )
        runs_by_state = dict(
            session.execute(
                select(Run.status, func.count())
                .where(Run.status.in_((RunState.QUEUED, RunState.RUNNING)))
                .group_by(Run.status)
            ).all()
        )
        bucket_columns = [
            func.sum(case((Result.total_seconds <= bound, 1), else_=0)) for bound in DURATION_BUCKETS
        ]
        row = session.execute(
            select(
                func.count(Result.total_seconds),
                func.coalesce(func.sum(Result.total_seconds), 0.0),
                *bucket_columns,
            )
        ).one()
    count, total, buckets = row[0], row[1], row[2:]
    histogram = [
        (f'{{le="{bound:g}"}}', float(b or 0)) for bound, b in zip(DURATION_BUCKETS, buckets, strict=True)
    ]
    histogram.append(('{le="+Inf"}', float(count)))
    lines = [
        *_family(
            "autoresearch_queue_depth",
            "gauge",
            "Runs waiting in the queue (first runs, confirmation runs, repeats of the best).",
            [("", runs_by_state.get(RunState.QUEUED, 0))],
        ),
        *_family(
            "autoresearch_running",
            "gauge",
            "Runs being run by a worker.",
            [("", runs_by_state.get(RunState.RUNNING, 0))],
        ),
        *_family(
            "autoresearch_experiments_finished_total",
            "counter",
            "Experiments that ended, by final status.",
            [(f'{{status="{s}"}}', by_status.get(s, 0)) for s in ExperimentStatus if s in FINAL_STATUSES],
        ),
        *_family(
            "autoresearch_experiments",
            "gauge",
            "Experiments stored, by status.",
            [(f'{{status="{s}"}}', by_status.get(s, 0)) for s in ExperimentStatus],
        ),
        "# HELP autoresearch_run_duration_seconds Wall time of a run (train and score), by the harness.",
        "# TYPE autoresearch_run_duration_seconds histogram",
        *[f"autoresearch_run_duration_seconds_bucket{labels} {value:g}" for labels, value in histogram],
        f"autoresearch_run_duration_seconds_sum {float(total):g}",
        f"autoresearch_run_duration_seconds_count {count}",
        *_family(
            "autoresearch_workers_online",
            "gauge",
            "Workers seen within two lease periods.",
            [("", online_count(ctx))],
        ),
        *_family(
            "autoresearch_sse_subscribers",
            "gauge",
            "Open GET /events streams.",
            [("", ctx.bus.subscriber_count)],
        ),
        *ctx.request_times.render(),
    ]
    return "\n".join(lines) + "\n"
