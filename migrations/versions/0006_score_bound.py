"""results.score_bound_seconds: the most the model may take while scored (issue 11's score bound)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Results stored before this column kept the bound, if their worker sent one, in `extra`.
    op.add_column("results", sa.Column("score_bound_seconds", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("results") as batch:
        batch.drop_column("score_bound_seconds")
