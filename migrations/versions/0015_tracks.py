"""Tracks: the project becomes the first track, and every experiment, run and noise estimate has one

A track is a preset on one platform, with its own baseline, best lineage and noise (server/models.py,
Track). The single project row becomes track 1, named `default`, with its pins, baseline and best;
its best stays the research repo's `best` branch. Every experiment, run, noise estimate and imported
result is the first track's (the columns' server default, so rows written without a track are too).
Workers gain the preset they report and why no track accepts them.

Downgrade makes the first track the project again; it refuses when another track has experiments
(the project table has room for one best only).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels = None
depends_on = None

FIRST_NAME = "default"
PINS = ("harness_id", "platform", "baseline_commit", "best_commit", "best_experiment_id")
PROJECT_COLUMNS = (*PINS, "best_since_experiment_id", "updated_at")
STANDING = ["agent_id", "status", "val_bpb", "best_before_val_bpb", "created_at"]  # ix_experiments_standing
NOISE_COLUMNS = ("platform", "harness_id", "sum_sq", "df", "runs", "experiments", "updated_at")


def _now() -> datetime:
    return datetime.now(UTC)


def _track_id() -> sa.Column[int]:
    return sa.Column("track_id", sa.Integer(), server_default=sa.text("1"), nullable=False)


def _noise_table(with_track: bool) -> None:
    columns = [_track_id()] if with_track else []
    op.create_table(
        "noise_estimates",
        *columns,
        sa.Column("platform", sa.String(length=200), nullable=False),
        sa.Column("harness_id", sa.String(length=128), nullable=False),
        sa.Column("sum_sq", sa.Float(), nullable=False),
        sa.Column("df", sa.Integer(), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("experiments", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        *([sa.ForeignKeyConstraint(["track_id"], ["tracks.id"])] if with_track else []),
        sa.PrimaryKeyConstraint(*(["track_id"] if with_track else []), "platform", "harness_id"),
    )


def _noise_rows(first_track_only: bool = False) -> list[dict[str, object]]:
    table = sa.Table("noise_estimates", sa.MetaData(), autoload_with=op.get_bind())
    statement = sa.select(*(table.c[name] for name in NOISE_COLUMNS))
    if first_track_only:
        statement = statement.where(table.c.track_id == 1)
    return [dict(row._mapping) for row in op.get_bind().execute(statement)]


def _insert_noise(rows: list[dict[str, object]], with_track: bool) -> None:
    if rows:
        table = sa.table(
            "noise_estimates",
            *(sa.column(name) for name in (("track_id",) if with_track else ()) + NOISE_COLUMNS),
        )
        op.bulk_insert(table, [({"track_id": 1} if with_track else {}) | row for row in rows])


def upgrade() -> None:
    tracks = op.create_table(
        "tracks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=40), nullable=False),
        sa.Column("preset", sa.String(length=32), nullable=True),
        sa.Column("platforms", sa.String(length=200), nullable=True),
        sa.Column("harness_id", sa.String(length=128), nullable=True),
        sa.Column("platform", sa.String(length=200), nullable=True),
        sa.Column("baseline_commit", sa.String(length=40), nullable=True),
        sa.Column("best_commit", sa.String(length=40), nullable=True),
        sa.Column("best_experiment_id", sa.Integer(), nullable=True),
        sa.Column("best_since_experiment_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    columns = ", ".join(PROJECT_COLUMNS)
    op.execute(
        f"INSERT INTO tracks (id, name, created_at, {columns}) "
        f"SELECT 1, '{FIRST_NAME}', updated_at, {columns} FROM project WHERE id = 1"
    )
    if op.get_bind().execute(sa.text("SELECT count(*) FROM tracks")).scalar() == 0:  # no project row
        op.bulk_insert(tracks, [{"id": 1, "name": FIRST_NAME, "created_at": _now(), "updated_at": _now()}])
    if op.get_bind().dialect.name == "postgresql":  # the next track created is 2
        op.execute("SELECT setval(pg_get_serial_sequence('tracks', 'id'), 1)")

    with op.batch_alter_table("experiments") as batch:
        batch.add_column(_track_id())
        batch.add_column(sa.Column("ported_from_id", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_experiments_track_id_tracks", "tracks", ["track_id"], ["id"])
        batch.create_foreign_key(
            "fk_experiments_ported_from_id_experiments", "experiments", ["ported_from_id"], ["id"]
        )
        batch.create_index("ix_experiments_track", ["track_id", "id"], unique=False)
        batch.drop_index("ix_experiments_standing")
        batch.create_index("ix_experiments_standing", ["track_id", *STANDING], unique=False)
    with op.batch_alter_table("runs") as batch:
        batch.add_column(_track_id())
        batch.create_foreign_key("fk_runs_track_id_tracks", "tracks", ["track_id"], ["id"])
        batch.drop_index("ix_runs_queue")
        batch.create_index("ix_runs_queue", ["status", "track_id", "queued_at", "id"], unique=False)
    with op.batch_alter_table("imported_results") as batch:
        batch.add_column(_track_id())
        batch.create_foreign_key("fk_imported_results_track_id_tracks", "tracks", ["track_id"], ["id"])
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("preset", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("refused", sa.Text(), nullable=True))

    noise = _noise_rows()  # the primary key gains the track: the table is made again
    op.drop_table("noise_estimates")
    _noise_table(with_track=True)
    _insert_noise(noise, with_track=True)
    op.drop_table("project")


def downgrade() -> None:
    bind = op.get_bind()
    others = bind.execute(sa.text("SELECT count(*) FROM experiments WHERE track_id != 1")).scalar()
    if others:
        raise RuntimeError(
            f"{others} experiments belong to tracks other than the first: a downgrade would lose them "
            "(the project before tracks holds one best only)"
        )
    project = op.create_table(
        "project",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("harness_id", sa.String(length=128), nullable=True),
        sa.Column("platform", sa.String(length=200), nullable=True),
        sa.Column("baseline_commit", sa.String(length=40), nullable=True),
        sa.Column("best_commit", sa.String(length=40), nullable=True),
        sa.Column("best_experiment_id", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("best_since_experiment_id", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    columns = ", ".join(PROJECT_COLUMNS)
    op.execute(f"INSERT INTO project (id, {columns}) SELECT 1, {columns} FROM tracks WHERE id = 1")
    if bind.execute(sa.text("SELECT count(*) FROM project")).scalar() == 0:
        op.bulk_insert(project, [{"id": 1, "updated_at": _now()}])

    noise = _noise_rows(first_track_only=True)
    op.drop_table("noise_estimates")
    _noise_table(with_track=False)
    _insert_noise(noise, with_track=False)
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("refused")
        batch.drop_column("preset")
    with op.batch_alter_table("imported_results") as batch:
        batch.drop_constraint("fk_imported_results_track_id_tracks", type_="foreignkey")
        batch.drop_column("track_id")
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("ix_runs_queue")
        batch.drop_constraint("fk_runs_track_id_tracks", type_="foreignkey")
        batch.drop_column("track_id")
        batch.create_index("ix_runs_queue", ["status", "queued_at", "id"], unique=False)
    with op.batch_alter_table("experiments") as batch:
        batch.drop_index("ix_experiments_standing")
        batch.create_index("ix_experiments_standing", STANDING, unique=False)
        batch.drop_index("ix_experiments_track")
        batch.drop_constraint("fk_experiments_ported_from_id_experiments", type_="foreignkey")
        batch.drop_constraint("fk_experiments_track_id_tracks", type_="foreignkey")
        batch.drop_column("ported_from_id")
        batch.drop_column("track_id")
    op.drop_table("tracks")
