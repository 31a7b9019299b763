"""Summaries of changes made again: constants now include knobs (protocol/constants.py)

What each experiment's change set is derived data. Clearing it makes the server summarise every
experiment again when it starts (server/crud/similar.py backfill, server/crud/change_kinds.py),
now with the knobs a change set inside dicts and calls (`DEVICE_SETTINGS["cpu"].width`).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels = None
depends_on = None

DERIVED = ("experiment_code_lines", "experiment_constants", "experiment_changes", "change_kinds")


def _forget_summaries() -> None:
    for table in DERIVED:
        op.execute(f"DELETE FROM {table}")
    op.execute("UPDATE experiments SET changes_parsed = NULL")


def upgrade() -> None:
    _forget_summaries()


def downgrade() -> None:
    _forget_summaries()  # summarised again by the older rule, at the next start
