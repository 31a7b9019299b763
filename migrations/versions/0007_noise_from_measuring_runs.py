"""The noise estimate rests on measuring runs only: the baseline's, and the repeats of kept changes

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

A candidate's own runs were chosen by the screen (its first run passed because it was low), so
their spread overstates the noise (docs/api.md, "Decisions"). Upgrade computes every platform and
harness's estimate again from the measuring runs (server/crud/noise.py, measuring_runs): all
valid runs of the baseline (an experiment without a base), and the valid `repeat` runs of any
other. Downgrade computes it again the old way, from every experiment's valid runs.

No schema change; a project with no measuring runs yet gets its repeats at the server's next
start, as a new project does.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels = None
depends_on = None


def _pool(groups: dict[tuple[str, str], list[list[float]]]) -> list[dict[str, object]]:
    """One estimate row per platform and harness, from each experiment's list of values."""
    now = datetime.now(UTC)
    rows = []
    for (platform, harness_id), samples in groups.items():
        several = [values for values in samples if len(values) > 1]
        if not several:
            continue
        rows.append(
            {
                "platform": platform,
                "harness_id": harness_id,
                "sum_sq": sum(sum((v - sum(vs) / len(vs)) ** 2 for v in vs) for vs in several),
                "df": sum(len(vs) - 1 for vs in several),
                "runs": sum(len(vs) for vs in several),
                "experiments": len(several),
                "updated_at": now,
            }
        )
    return rows


def _replace(rows: list[dict[str, object]]) -> None:
    noise = sa.Table("noise_estimates", sa.MetaData(), autoload_with=op.get_bind())
    op.get_bind().execute(noise.delete())
    if rows:
        op.get_bind().execute(noise.insert(), rows)


def _valid_runs(measuring_only: bool) -> dict[tuple[str, str], list[list[float]]]:
    """(platform, harness) -> each experiment's valid values, on the project's pins."""
    bind = op.get_bind()
    meta = sa.MetaData()
    experiments = sa.Table("experiments", meta, autoload_with=bind)
    runs = sa.Table("runs", meta, autoload_with=bind)
    results = sa.Table("results", meta, autoload_with=bind)
    project = sa.Table("project", meta, autoload_with=bind)
    pins = bind.execute(sa.select(project.c.platform, project.c.harness_id).where(project.c.id == 1)).first()
    if pins is None or pins.platform is None or pins.harness_id is None:
        return {}
    query = (
        sa.select(results.c.experiment_id, results.c.val_bpb)
        .join(runs, runs.c.id == results.c.run_id)
        .join(experiments, experiments.c.id == results.c.experiment_id)
        .where(
            results.c.status == "ok",
            results.c.val_bpb.is_not(None),
            results.c.device == pins.platform,
            results.c.harness_id == pins.harness_id,
        )
        .order_by(results.c.experiment_id, runs.c.number)
    )
    if measuring_only:
        query = query.where(sa.or_(experiments.c.base_commit.is_(None), runs.c.kind == "repeat"))
    by_experiment: dict[int, list[float]] = defaultdict(list)
    for row in bind.execute(query):
        by_experiment[row.experiment_id].append(row.val_bpb)
    return {(pins.platform, pins.harness_id): list(by_experiment.values())}


def upgrade() -> None:
    _replace(_pool(_valid_runs(measuring_only=True)))


def downgrade() -> None:
    _replace(_pool(_valid_runs(measuring_only=False)))
