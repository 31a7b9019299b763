"""change_kinds and experiments.changes_parsed: what each decided experiment changed, stored for
keep rates by kind of change and near misses (issue 16). Existing decided experiments are filled
in when the server starts (server/crud/change_kinds.py, `summarise_pending`): that needs the
research repo, which a migration does not see.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("experiments", sa.Column("changes_parsed", sa.Boolean(), nullable=True))
    with op.batch_alter_table("experiments") as batch:
        batch.create_index("ix_experiments_changes_parsed", ["changes_parsed", "id"], unique=False)
    op.create_table(
        "change_kinds",
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("part", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("direction", sa.String(length=8), nullable=True),
        sa.Column("old", sa.Float(), nullable=True),
        sa.Column("new", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"]),
        sa.PrimaryKeyConstraint("experiment_id", "part", "name"),
    )


def downgrade() -> None:
    op.drop_table("change_kinds")
    with op.batch_alter_table("experiments") as batch:
        batch.drop_index("ix_experiments_changes_parsed")
        batch.drop_column("changes_parsed")
