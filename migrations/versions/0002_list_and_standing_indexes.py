"""Indexes for GET /experiments?status= and for per-agent standings at 100,000 experiments

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("experiments", schema=None) as batch_op:
        batch_op.create_index("ix_experiments_status_id", ["status", "id"], unique=False)
        batch_op.create_index(
            "ix_experiments_standing",
            ["agent_id", "status", "val_bpb", "best_before_val_bpb", "created_at"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("experiments", schema=None) as batch_op:
        batch_op.drop_index("ix_experiments_standing")
        batch_op.drop_index("ix_experiments_status_id")
