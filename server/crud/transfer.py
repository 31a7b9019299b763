"""The experiments of changes tried on more than one track (server/rules/transfer.py is the rule)."""

from __future__ import annotations

from sqlalchemy import distinct, func, select
from sqlalchemy.orm import Session

from server.models import Experiment, ExperimentChange, Track
from server.rules.transfer import Tried

# The changes (their removed and added lines) that experiments of two tracks or more made.
_SHARED = (
    select(ExperimentChange.lines_sha)
    .join(Experiment, Experiment.id == ExperimentChange.experiment_id)
    .group_by(ExperimentChange.lines_sha)
    .having(func.count(distinct(Experiment.track_id)) > 1)
)
_TRIED = (
    select(
        Experiment.id,
        Experiment.track_id,
        ExperimentChange.lines_sha,
        Experiment.status,
        Experiment.decision,
    )
    .join(ExperimentChange, ExperimentChange.experiment_id == Experiment.id)
    .where(ExperimentChange.lines_sha.in_(_SHARED))
    .order_by(Experiment.id)
)


def tried_on_several_tracks(session: Session) -> list[Tried]:
    """Every experiment of a change that experiments of more than one track made (none, without
    a second track: no query then)."""
    if (session.scalar(select(func.count()).select_from(Track)) or 0) < 2:
        return []
    return [Tried(*row) for row in session.execute(_TRIED)]
