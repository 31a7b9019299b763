"""The project row: harness id, platform and the current best."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from server.models import EXPERIMENTS, PROJECT, Project


def load_project(session: Session, lock: bool = False) -> Project:
    """The project; `lock` takes its row lock (PostgreSQL), serialising decisions on `best`.

    A locked read refreshes the row even if this session loaded it before.
    """
    statement = select(Project).where(Project.id == 1)
    if lock:
        statement = statement.with_for_update().execution_options(populate_existing=True)
    return session.scalars(statement).one()


@dataclass(frozen=True)
class ProjectState:
    """The project's pins and its best, as read: what a result is counted and judged against, and
    what decisions move on (with its row locked)."""

    harness_id: str | None
    platform: str | None
    best_commit: str | None
    best_experiment_id: int | None
    # The last experiment id when the best became the best (server/decisions.py, best_repeats_due).
    best_since_experiment_id: int | None


_CURRENT_BEST = select(
    PROJECT.c.harness_id,
    PROJECT.c.platform,
    PROJECT.c.best_commit,
    PROJECT.c.best_experiment_id,
    PROJECT.c.best_since_experiment_id,
).where(PROJECT.c.id == 1)
_LOCKED_BEST = _CURRENT_BEST.with_for_update()
_BEST_SAMPLE = (
    select(EXPERIMENTS.c.valid_runs, EXPERIMENTS.c.val_bpb)
    .select_from(PROJECT.join(EXPERIMENTS, EXPERIMENTS.c.id == PROJECT.c.best_experiment_id))
    .where(PROJECT.c.id == 1)
)


def current_best(session: Session, lock: bool = False) -> ProjectState:
    """The project's pins and best: unlocked, cheap enough for every result; `lock` takes the row's
    lock (PostgreSQL; SQLite has one writer anyway), serialising the decisions that move the best
    and the submissions that count from it."""
    return ProjectState(*session.connection().execute(_LOCKED_BEST if lock else _CURRENT_BEST).one())


def move_best(
    session: Session, commit: str, experiment_id: int, since_experiment_id: int, now: datetime
) -> None:
    """Point the project's best at `commit`, the commit of experiment `experiment_id`."""
    session.connection().execute(
        update(PROJECT)
        .where(PROJECT.c.id == 1)
        .values(
            best_commit=commit,
            best_experiment_id=experiment_id,
            best_since_experiment_id=since_experiment_id,
            updated_at=now,
        )
    )


def best_sample(session: Session) -> tuple[int, float | None]:
    """The best's valid runs and their mean (0, None before it is measured)."""
    row = session.connection().execute(_BEST_SAMPLE).first()
    return (row.valid_runs, row.val_bpb) if row is not None else (0, None)
