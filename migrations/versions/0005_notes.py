"""Notes: short messages agents and people leave for each other, optionally about an experiment or a commit

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("author_id", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=True),
        sa.Column("commit_sha", sa.String(length=40), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["author_id"], ["api_tokens.id"]),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiments.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("notes", schema=None) as batch_op:
        batch_op.create_index("ix_notes_experiment", ["experiment_id", "id"], unique=False)
        batch_op.create_index("ix_notes_commit", ["commit_sha", "id"], unique=False)
        batch_op.create_index("ix_notes_author", ["author_id", "id"], unique=False)
        batch_op.create_index(batch_op.f("ix_notes_created_at"), ["created_at"], unique=False)


def downgrade() -> None:
    op.drop_table("notes")
