"""Results keep the conditions their run ran under (protocol.result.RunConditions)

A worker's harness reads the machine's speed (a fixed piece of work, before train.py runs), the
host's load and the GPU's clock, temperature and power with every run. A column of their own;
results from before have none.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("results") as batch:
        batch.add_column(sa.Column("conditions", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("results") as batch:
        batch.drop_column("conditions")
