"""The project row: harness id, platform and the current best."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from server.models import EXPERIMENTS, PROJECT, AnyRow, Project


def load_project(session: Session, lock: bool = False) -> Project:
    """The project; `lock` takes its row lock (PostgreSQL), serialising decisions on `best`.

    A locked read refreshes the row even if this session loaded it before.
    """
    statement = select(Project).where(Project.id == 1)
    if lock:
        statement = statement.with_for_update().execution_options(populate_existing=True)
    return session.scalars(statement).one()


_CURRENT_BEST = select(
    PROJECT.c.harness_id, PROJECT.c.platform, PROJECT.c.best_commit, PROJECT.c.best_experiment_id
).where(PROJECT.c.id == 1)
_BEST_SAMPLE = (
    select(EXPERIMENTS.c.valid_runs, EXPERIMENTS.c.val_bpb)
    .select_from(PROJECT.join(EXPERIMENTS, EXPERIMENTS.c.id == PROJECT.c.best_experiment_id))
    .where(PROJECT.c.id == 1)
)


def current_best(session: Session) -> AnyRow:
    """The project's pins and best as a plain row, unlocked: cheap enough for every result."""
    return session.connection().execute(_CURRENT_BEST).one()


def best_sample(session: Session) -> tuple[int, float | None]:
    """The best's valid runs and their mean (0, None before it is measured)."""
    row = session.connection().execute(_BEST_SAMPLE).first()
    return (row.valid_runs, row.val_bpb) if row is not None else (0, None)
