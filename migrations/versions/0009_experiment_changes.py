"""experiment_changes, experiment_constants, experiment_code_lines: what each experiment's change touched ("has this been tried?")

Existing experiments are summarized when the server starts (server/crud/similar.py, backfill):
a migration has no research repo to read their train.py from.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "experiment_changes",
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("parsed", sa.Boolean(), nullable=False),
        sa.Column("lines_sha", sa.String(length=64), nullable=False),
        sa.Column("shape_sha", sa.String(length=64), nullable=True),
        sa.Column("code_lines", sa.Integer(), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.Column("touched", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"]),
        sa.PrimaryKeyConstraint("experiment_id"),
    )
    with op.batch_alter_table("experiment_changes", schema=None) as batch_op:
        batch_op.create_index("ix_experiment_changes_lines", ["lines_sha"], unique=False)
        batch_op.create_index("ix_experiment_changes_shape", ["shape_sha"], unique=False)
    op.create_table(
        "experiment_constants",
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"]),
        sa.PrimaryKeyConstraint("experiment_id", "name"),
    )
    with op.batch_alter_table("experiment_constants", schema=None) as batch_op:
        batch_op.create_index("ix_experiment_constants_value", ["name", "value"], unique=False)
    op.create_table(
        "experiment_code_lines",
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("line_sha", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"]),
        sa.PrimaryKeyConstraint("experiment_id", "line_sha"),
    )
    with op.batch_alter_table("experiment_code_lines", schema=None) as batch_op:
        batch_op.create_index("ix_experiment_code_lines_line", ["line_sha"], unique=False)


def downgrade() -> None:
    op.drop_table("experiment_code_lines")
    op.drop_table("experiment_constants")
    op.drop_table("experiment_changes")
