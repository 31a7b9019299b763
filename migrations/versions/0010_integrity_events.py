"""integrity_events: runs that ended in an integrity class, and who cleared them

An agent with an event not cleared has its queued experiments held (server/crud/integrity.py).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "integrity_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("agent_id", sa.Integer(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("result_id", sa.String(length=36), nullable=False),
        sa.Column("error_class", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cleared_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cleared_by", sa.Integer(), nullable=True),
        sa.Column("clear_note", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["agent_id"], ["api_tokens.id"]),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"]),
        sa.ForeignKeyConstraint(["result_id"], ["results.id"]),
        sa.ForeignKeyConstraint(["cleared_by"], ["api_tokens.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("result_id"),
    )
    with op.batch_alter_table("integrity_events", schema=None) as batch_op:
        batch_op.create_index("ix_integrity_events_open", ["cleared_at", "agent_id"], unique=False)


def downgrade() -> None:
    op.drop_table("integrity_events")
