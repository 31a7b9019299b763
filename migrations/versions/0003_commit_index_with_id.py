"""The commit index ends with the id: "the oldest experiment of a commit" is one index lookup

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("experiments", schema=None) as batch_op:
        batch_op.drop_index("ix_experiments_commit")
        batch_op.create_index("ix_experiments_commit", ["commit_sha", "id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("experiments", schema=None) as batch_op:
        batch_op.drop_index("ix_experiments_commit")
        batch_op.create_index("ix_experiments_commit", ["commit_sha"], unique=False)
