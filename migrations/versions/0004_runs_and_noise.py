"""Runs and noise: an experiment has several runs, each with its seed; decisions record effect ± noise

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

Existing projects are carried over: every experiment's single run becomes its run 1 (its lease,
result and progress move to that run), its result counts as its one valid run when it was ok on
the project's platform and harness, and old decisions get their effect (one run against one).
The noise estimate starts from whatever repeats exist: experiments with the same train.py that
were run more than once (resubmitted after a cancel or an infrastructure failure); they all ran
with one seed, so they may understate the noise, and the server adds repeats of the best at its
next start. Runs already finished keep a null seed (they ran with the worker's SEED setting).

Downgrade keeps each experiment's run 1 only.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels = None
depends_on = None

DECISION_COLUMNS = ("effect", "effect_se", "effect_bound", "p_value", "sigma")


def _seed(experiment_id: int, number: int) -> int:
    # How seeds were computed then (0012 gives queued runs secret ones; a migration must not
    # import code that may change).
    digest = hashlib.sha256(f"autoresearch run {experiment_id}:{number}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 33


def _unique_experiment_name() -> str:
    # 0001 left the constraint unnamed: PostgreSQL named it so; SQLite gets it from the convention.
    return (
        "results_experiment_id_key"
        if op.get_bind().dialect.name == "postgresql"
        else "uq_results_experiment_id"
    )


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("experiment_id", "number"),
    )
    op.create_index("ix_runs_queue", "runs", ["status", "queued_at", "id"], unique=False)
    op.create_table(
        "noise_estimates",
        sa.Column("platform", sa.String(length=200), nullable=False),
        sa.Column("harness_id", sa.String(length=128), nullable=False),
        sa.Column("sum_sq", sa.Float(), nullable=False),
        sa.Column("df", sa.Integer(), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("experiments", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("platform", "harness_id"),
    )
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("valid_runs", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("val_bpb_m2", sa.Float(), nullable=False, server_default="0"))
        for name in DECISION_COLUMNS:
            batch.add_column(sa.Column(name, sa.Float(), nullable=True))
        for name in ("compared_runs", "best_runs", "sigma_df"):
            batch.add_column(sa.Column(name, sa.Integer(), nullable=True))
    with op.batch_alter_table("project") as batch:
        batch.add_column(sa.Column("best_since_experiment_id", sa.Integer(), nullable=True))
    for table in ("leases", "results", "progress_events"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("run_id", sa.Integer(), nullable=True))
    with op.batch_alter_table("results") as batch:
        batch.add_column(sa.Column("seed", sa.BigInteger(), nullable=True))

    _carry_over()

    with op.batch_alter_table("leases") as batch:
        batch.alter_column("run_id", existing_type=sa.Integer(), nullable=False)
        batch.create_foreign_key("fk_leases_run_id_runs", "runs", ["run_id"], ["id"])
        batch.create_index("ix_leases_run_id", ["run_id"], unique=False)
    with op.batch_alter_table(
        "results", naming_convention={"uq": "uq_%(table_name)s_%(column_0_name)s"}
    ) as batch:
        batch.alter_column("run_id", existing_type=sa.Integer(), nullable=False)
        batch.drop_constraint(_unique_experiment_name(), type_="unique")
        batch.create_index("ix_results_experiment_id", ["experiment_id"], unique=False)
        batch.create_unique_constraint("results_run_id_key", ["run_id"])
        batch.create_foreign_key("fk_results_run_id_runs", "runs", ["run_id"], ["id"])
    with op.batch_alter_table("progress_events") as batch:
        batch.alter_column("run_id", existing_type=sa.Integer(), nullable=False)
        batch.create_foreign_key("fk_progress_events_run_id_runs", "runs", ["run_id"], ["id"])
    with op.batch_alter_table("experiments") as batch:
        batch.drop_index("ix_experiments_queue")
        batch.drop_column("attempts")
    with op.batch_alter_table("project") as batch:
        batch.drop_column("best_val_bpb")


def _carry_over() -> None:
    """One run per experiment, from its old columns; leases, results and progress follow it."""
    bind = op.get_bind()
    meta = sa.MetaData()
    experiments = sa.Table("experiments", meta, autoload_with=bind)
    runs = sa.Table("runs", meta, autoload_with=bind)
    results = sa.Table("results", meta, autoload_with=bind)
    project = sa.Table("project", meta, autoload_with=bind)
    pins = bind.execute(sa.select(project.c.platform, project.c.harness_id).where(project.c.id == 1)).first()
    platform, harness_id = (pins.platform, pins.harness_id) if pins is not None else (None, None)
    measured = {
        row.experiment_id: row
        for row in bind.execute(
            sa.select(results.c.experiment_id, results.c.status, results.c.device, results.c.harness_id)
        )
    }
    last_id = 0
    by_blob: dict[str, list[float]] = defaultdict(list)
    for e in bind.execute(sa.select(experiments)).all():
        last_id = max(last_id, e.id)
        result = measured.get(e.id)
        if e.status in ("queued", "running"):
            status = e.status
        elif result is not None:
            status = "finished"
        else:
            status = "infra_failed" if e.status == "infra_failed" else "cancelled"
        bind.execute(
            runs.insert().values(
                experiment_id=e.id,
                number=1,
                seed=_seed(e.id, 1) if status in ("queued", "running") else None,
                kind="first",
                status=status,
                attempts=e.attempts,
                queued_at=e.queued_at,
                started_at=e.started_at,
                finished_at=e.finished_at if status != "running" else None,
            )
        )
        valid = (
            result is not None
            and result.status == "ok"
            and e.val_bpb is not None
            and platform in (None, result.device)
            and harness_id in (None, result.harness_id)
        )
        values: dict[str, object] = {"valid_runs": 1 if valid else 0, "val_bpb_m2": 0.0}
        if not valid:
            values["val_bpb"] = None
        elif e.decision is not None and e.best_before_val_bpb is not None:
            values |= {"effect": e.val_bpb - e.best_before_val_bpb, "compared_runs": 1, "best_runs": 1}
        if valid and e.train_py_blob is not None:
            by_blob[e.train_py_blob].append(e.val_bpb)
        bind.execute(experiments.update().where(experiments.c.id == e.id).values(**values))
    for table in ("leases", "results", "progress_events"):
        target = sa.Table(table, meta, autoload_with=bind)
        run_of = sa.select(runs.c.id).where(runs.c.experiment_id == target.c.experiment_id).scalar_subquery()
        bind.execute(target.update().values(run_id=run_of))
    bind.execute(project.update().where(project.c.id == 1).values(best_since_experiment_id=last_id))
    repeats = [values for values in by_blob.values() if len(values) > 1]
    if repeats and platform is not None and harness_id is not None:
        sum_sq = sum(sum((v - sum(vs) / len(vs)) ** 2 for v in vs) for vs in repeats)
        noise = sa.Table("noise_estimates", meta, autoload_with=bind)
        bind.execute(
            noise.insert().values(
                platform=platform,
                harness_id=harness_id,
                sum_sq=sum_sq,
                df=sum(len(vs) - 1 for vs in repeats),
                runs=sum(len(vs) for vs in repeats),
                experiments=len(repeats),
                updated_at=datetime.now(UTC),
            )
        )


def downgrade() -> None:
    bind = op.get_bind()
    with op.batch_alter_table("project") as batch:
        batch.add_column(sa.Column("best_val_bpb", sa.Float(), nullable=True))
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"))
        batch.create_index("ix_experiments_queue", ["status", "queued_at", "id"], unique=False)
    meta = sa.MetaData()
    experiments = sa.Table("experiments", meta, autoload_with=bind)
    runs = sa.Table("runs", meta, autoload_with=bind)
    project = sa.Table("project", meta, autoload_with=bind)
    first = sa.select(runs.c.attempts).where(runs.c.experiment_id == experiments.c.id, runs.c.number == 1)
    bind.execute(experiments.update().values(attempts=sa.func.coalesce(first.scalar_subquery(), 0)))
    best = sa.select(experiments.c.val_bpb).where(experiments.c.id == project.c.best_experiment_id)
    bind.execute(project.update().values(best_val_bpb=best.scalar_subquery()))
    later = sa.select(runs.c.id).where(runs.c.number > 1)
    for table in ("progress_events", "results", "leases"):
        target = sa.Table(table, meta, autoload_with=bind)
        bind.execute(target.delete().where(target.c.run_id.in_(later)))
    with op.batch_alter_table("progress_events") as batch:
        batch.drop_constraint("fk_progress_events_run_id_runs", type_="foreignkey")
        batch.drop_column("run_id")
    with op.batch_alter_table("results") as batch:
        batch.drop_constraint("fk_results_run_id_runs", type_="foreignkey")
        batch.drop_constraint("results_run_id_key", type_="unique")
        batch.drop_index("ix_results_experiment_id")
        batch.create_unique_constraint(_unique_experiment_name(), ["experiment_id"])
        batch.drop_column("seed")
        batch.drop_column("run_id")
    with op.batch_alter_table("leases") as batch:
        batch.drop_index("ix_leases_run_id")
        batch.drop_constraint("fk_leases_run_id_runs", type_="foreignkey")
        batch.drop_column("run_id")
    with op.batch_alter_table("project") as batch:
        batch.drop_column("best_since_experiment_id")
    with op.batch_alter_table("experiments") as batch:
        for name in (*DECISION_COLUMNS, "compared_runs", "best_runs", "sigma_df", "valid_runs", "val_bpb_m2"):
            batch.drop_column(name)
    op.drop_table("noise_estimates")
    op.drop_index("ix_runs_queue", table_name="runs")
    op.drop_table("runs")
