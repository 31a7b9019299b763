"""The cached chart is always the chart a fresh read of the database would draw."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from protocol.states import ExperimentStatus
from server.core.db import Database, create_db_engine
from server.crud import pages
from server.crud.tracks import load_track
from server.models import Experiment, NoiseEstimate, utcnow
from server.pages.chart_cache import ChartCache
from testkit.seeded_history import seed_experiments
from tests.pages.live_server import init_research


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    settings, _agents, _worker = init_research(tmp_path, agents=("alice",))
    database = Database(create_db_engine(settings.resolved_database_url))
    yield database
    database.dispose()


def finish(db: Database, status: str, val_bpb: float | None, finished_at: datetime) -> None:
    """One more plotted experiment, finished at `finished_at` (on the baseline's commit)."""
    with db.write() as session:
        base = session.get(Experiment, 1)
        assert base is not None
        session.add(
            Experiment(
                source="agent", description=f"late {uuid.uuid4().hex[:6]}", base_commit=base.commit_sha,
                commit_sha=base.commit_sha, status=status, created_at=finished_at, queued_at=finished_at,
                finished_at=finished_at, val_bpb=val_bpb,
            )
        )  # fmt: skip


def view_markup(cache: ChartCache, db: Database) -> tuple[str, int]:
    with db.read() as session:
        view = cache.view(session, pages.status_totals(session))
        return str(view.markup), view.plotted.crashed_runs


def test_the_cached_chart_is_always_a_fresh_read(db: Database) -> None:
    seed_experiments(db, 40, in_flight=2)
    cache = ChartCache()
    first, _ = view_markup(cache, db)
    later = datetime.now(UTC) + timedelta(days=1)
    steps = [
        (ExperimentStatus.KEPT, 0.5, later),  # finishes after everything read so far: read incrementally
        (ExperimentStatus.REVERTED, None, later + timedelta(minutes=1)),  # a crash
        (ExperimentStatus.INFRA_FAILED, None, later + timedelta(minutes=2)),
        (
            ExperimentStatus.REVERTED,
            0.9,
            datetime(2000, 1, 1, tzinfo=UTC),
        ),  # "before" the others: read everything again
    ]
    previous = first
    for status, val_bpb, finished_at in steps:
        finish(db, status, val_bpb, finished_at)
        cached = view_markup(cache, db)
        assert cached == view_markup(ChartCache(), db)
        assert cached[0] != previous
        previous = cached[0]
    assert view_markup(cache, db) == (previous, view_markup(ChartCache(), db)[1])  # unchanged: same view


def test_the_best_run_again_moves_its_line_and_band_in_the_cached_chart(db: Database) -> None:
    """No experiment finishes, yet the chart changes: the best's repeats move its mean, and the
    noise estimate sizes its band."""
    seed_experiments(db, 30, in_flight=0)
    finish(db, ExperimentStatus.KEPT, 0.95, datetime.now(UTC) + timedelta(days=1))
    with db.write() as session:
        best = session.scalars(select(Experiment).order_by(Experiment.id.desc()).limit(1)).one()
        best.valid_runs = 2
        load_track(session).best_experiment_id = best.id
    cache = ChartCache()
    before, _ = view_markup(cache, db)
    with db.write() as session:
        project = load_track(session)
        project.platform, project.harness_id = "gpu", "harness"  # as a server's start pins them
        best = session.get(Experiment, project.best_experiment_id)
        assert best is not None
        best.val_bpb, best.valid_runs = 0.951, 4
        session.add(
            NoiseEstimate(platform="gpu", harness_id="harness", sum_sq=3e-6, df=3, runs=4,
                          experiments=1, updated_at=utcnow())
        )  # fmt: skip
    after, _ = view_markup(cache, db)
    assert after != before and after == view_markup(ChartCache(), db)[0]
    assert 'class="best-band" d="M' in after and 'class="best-band" d=""' in before
