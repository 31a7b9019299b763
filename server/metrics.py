"""Prometheus metrics (prometheus_client): database values computed at scrape time, request timing.

Computing at scrape time keeps the numbers right across restarts and with several readers of
one database; each scrape is a handful of indexed aggregate queries. Each app has a registry of
its own (tests run several apps in one process).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from protocol.states import FINAL_STATUSES, ExperimentStatus, RunState
from server.context import AppContext
from server.crud import metrics
from server.flows.workers import online

DURATION_BUCKETS = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 3600.0)


class DatabaseCollector(Collector):
    """The queue, the experiments by status, run durations and workers, read from the database."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def describe(self) -> list[Metric]:
        return []  # registering must not query the database

    def collect(self) -> Iterator[Metric]:
        with self.ctx.db.read() as session:
            by_status = metrics.experiments_by_status(session)
            runs_by_state = metrics.live_runs_by_state(session)
            count, total, buckets = metrics.run_durations(session, DURATION_BUCKETS)
        yield GaugeMetricFamily(
            "autoresearch_queue_depth",
            "Runs waiting in the queue (first runs, confirmation runs, repeats of the best).",
            runs_by_state.get(RunState.QUEUED, 0),
        )
        yield GaugeMetricFamily(
            "autoresearch_running", "Runs being run by a worker.", runs_by_state.get(RunState.RUNNING, 0)
        )
        finished = CounterMetricFamily(
            "autoresearch_experiments_finished", "Experiments that ended, by final status.", labels=["status"]
        )
        stored = GaugeMetricFamily(
            "autoresearch_experiments", "Experiments stored, by status.", labels=["status"]
        )
        for status in ExperimentStatus:
            stored.add_metric([status], by_status.get(status, 0))
            if status in FINAL_STATUSES:
                finished.add_metric([status], by_status.get(status, 0))
        yield finished
        yield stored
        yield HistogramMetricFamily(
            "autoresearch_run_duration_seconds",
            "Wall time of a run (train and score), by the harness.",
            buckets=[
                *((f"{bound:g}", float(b or 0)) for bound, b in zip(DURATION_BUCKETS, buckets, strict=True)),
                ("+Inf", float(count)),
            ],
            sum_value=float(total),
        )
        yield GaugeMetricFamily(
            "autoresearch_workers_online", "Workers seen within two lease periods.", online(self.ctx)
        )
        yield GaugeMetricFamily(
            "autoresearch_sse_subscribers", "Open GET /events streams.", self.ctx.bus.subscriber_count
        )


def metrics_registry(ctx: AppContext) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(ctx))
    registry.register(ctx.request_times)
    return registry


def render_metrics(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
