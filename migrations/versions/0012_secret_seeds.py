"""Queued runs get seeds no candidate can know (server/crud/runs.py new_seed)

Until now a run's seed was a hash of its experiment's id and its number, so anyone could compute
the seeds of runs not yet started and give a candidate the initialisation it found lucky offline
for each. Runs that have not started are given a seed from the operating system's secret source,
as every run queued from now on is; runs that started keep theirs (a retry uses the same seed).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07
"""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels = None
depends_on = None

SEED_BITS = 31  # as server/crud/runs.py (a migration must not import code that may change)


def upgrade() -> None:
    bind = op.get_bind()
    queued = bind.execute(sa.text("SELECT id FROM runs WHERE status = 'queued'")).scalars().all()
    for run_id in queued:
        bind.execute(
            sa.text("UPDATE runs SET seed = :seed WHERE id = :id"), {"seed": secrets.randbits(SEED_BITS), "id": run_id}
        )


def downgrade() -> None:
    pass  # the secret seeds stay: the older code reads a seed, whichever way it was drawn
