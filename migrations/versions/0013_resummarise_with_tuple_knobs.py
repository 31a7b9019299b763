"""Summaries of changes made again: each number of a tuple or list is a knob (`ADAM_BETAS[1]`)

As 0011: what each experiment's change set is derived data, so the derived tables are emptied and
the server summarises every experiment again when it starts (server/crud/similar.py backfill),
now with the knobs inside tuples and lists.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("experiment_code_lines", "experiment_constants", "experiment_changes", "change_kinds"):
        op.execute(f"DELETE FROM {table}")
    op.execute("UPDATE experiments SET changes_parsed = NULL")


def downgrade() -> None:
    upgrade()  # summarised again by the older rule, at the next start
