"""Has this been tried? Storing what each experiment's change touched, and finding the experiments
whose change resembles one (the rule itself is server/rules/similarity.py).

Every queued experiment gets its change summary stored with it (`store_change`, in the
transaction that inserts it); experiments from before that are summarized when the server
starts (server/flows/summaries.py, `backfill`). Finding similar experiments reads no git: the
rule's candidates come from index lookups, each a necessary condition of one kind of match, and
the rule (server/rules/similarity.py) then runs on those alone:
- the same content hash (`identical`);
- the same removed and added lines (`lines_sha`: same_change, same_change_other_base);
- the same constants set and the same code lines (`shape_sha`), with the first constant's new
  value within `nearby_range` (experiment_constants' value index: nearby_constants), or among the
  newest MAX_SAME_SHAPE of that shape (same_direction: a direction is not indexed);
- a constant set to the same value (contained: all of them), or a code line in common
  (experiment_code_lines: overlapping_code needs most of them in common, contained all of its).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import bindparam, func, or_, select
from sqlalchemy.orm import Session

from protocol.schemas import SimilarExperiment
from protocol.states import ExperimentStatus, SimilarityKind
from server.crud.experiments import labelled, track_names
from server.models import (
    NOT_RERUN_STATUSES,
    Experiment,
    ExperimentChange,
    ExperimentCodeLine,
    ExperimentConstant,
)
from server.rules.similarity import (
    Change,
    Match,
    Similarity,
    index_keys,
    nearby_range,
    rank,
    sort_key,
)
from server.trainpy.changes import ChangeSummary, ConstantChange, code_of

MAX_SIMILAR = 20  # the most alike first; more is rarely read
# A change contained in one that sets more constants than this is found through its first ones
# only (or its code lines): the OR of one term per constant stays a bounded statement.
MAX_CONSTANTS_ASKED = 64
# The changes of the same shape (constants and code) a question reads for `same_direction`, the
# newest first: a bounded read, where a sweep of one constant may have hundreds of that shape.
MAX_SAME_SHAPE = 50


def store_change(session: Session, experiment_id: int, summary: ChangeSummary) -> None:
    keys = index_keys(summary)
    session.add(
        ExperimentChange(
            experiment_id=experiment_id,
            parsed=summary.parsed,
            lines_sha=keys.lines,
            shape_sha=keys.shape,
            code_lines=keys.code_lines,
            summary={
                "constants": [[c.name, c.old, c.new] for c in summary.constants],
                "regions": list(summary.regions),
                "removed": list(summary.removed),
                "added": list(summary.added),
            },
            touched="\n".join(
                ["-" + line for line in summary.removed] + ["+" + line for line in summary.added]
            ),
        )
    )
    session.add_all(
        ExperimentConstant(experiment_id=experiment_id, name=c.name, value=c.new) for c in summary.constants
    )
    session.add_all(ExperimentCodeLine(experiment_id=experiment_id, line_sha=sha) for sha in keys.line_keys)
    session.flush()


def stored_summary(row: ExperimentChange) -> ChangeSummary:
    data = row.summary
    constants = tuple(ConstantChange(name, old, new) for name, old, new in data["constants"])
    return ChangeSummary(
        constants=constants,
        regions=tuple(data["regions"]),
        removed=tuple(data["removed"]),
        added=tuple(data["added"]),
        code=code_of(constants, data["removed"], data["added"]),
        parsed=row.parsed,
    )


def unsummarised(session: Session, limit: int) -> list[Any]:
    """Up to `limit` experiments with a base but no stored summary (queued before summaries were
    stored): id, base_commit, commit_sha, oldest first."""
    return list(
        session.execute(
            select(Experiment.id, Experiment.base_commit, Experiment.commit_sha)
            .outerjoin(ExperimentChange, ExperimentChange.experiment_id == Experiment.id)
            .where(ExperimentChange.experiment_id.is_(None), Experiment.base_commit.is_not(None))
            .order_by(Experiment.id)
            .limit(limit)
        ).all()
    )


def _candidates(session: Session, change: Change, exclude: set[int], before_id: int | None) -> list[Match]:
    """The stored changes that can match `change` (one necessary condition of a kind each), ranked
    by the rule."""
    summary = change.summary
    keys = index_keys(summary)
    conditions = [ExperimentChange.lines_sha == keys.lines]
    if keys.shape is not None:  # nearby_constants: the same shape, and the first constant nearby
        first = summary.constants[0]
        setting = select(ExperimentConstant.experiment_id).where(ExperimentConstant.name == first.name)
        if first.new is None:
            setting = setting.where(ExperimentConstant.value.is_(None))
        else:
            low, high = nearby_range(first.new)
            setting = setting.where(ExperimentConstant.value.between(low, high))
        conditions.append(
            (ExperimentChange.shape_sha == keys.shape) & ExperimentChange.experiment_id.in_(setting)
        )
        newest = select(ExperimentChange.experiment_id).where(ExperimentChange.shape_sha == keys.shape)
        if before_id is not None:
            newest = newest.where(ExperimentChange.experiment_id < before_id)
        newest = newest.order_by(ExperimentChange.experiment_id.desc()).limit(MAX_SAME_SHAPE)
        conditions.append(ExperimentChange.experiment_id.in_(newest))
    if summary.parsed and summary.constants:  # contained: a constant set to the same value
        same_value = [
            (ExperimentConstant.name == c.name)
            & (ExperimentConstant.value.is_(None) if c.new is None else ExperimentConstant.value == c.new)
            for c in summary.constants[:MAX_CONSTANTS_ASKED]
        ]
        setting_one = select(ExperimentConstant.experiment_id).where(or_(*same_value))
        conditions.append(ExperimentChange.experiment_id.in_(setting_one))
    if keys.line_keys:  # overlapping_code and contained: at least one code line in common
        sharing = select(ExperimentCodeLine.experiment_id).where(
            ExperimentCodeLine.line_sha.in_(keys.line_keys)
        )
        conditions.append(ExperimentChange.experiment_id.in_(sharing))
    statement = (
        select(ExperimentChange, Experiment.base_commit)
        .join(Experiment, Experiment.id == ExperimentChange.experiment_id)
        .where(or_(*conditions))
    )
    if before_id is not None:
        statement = statement.where(ExperimentChange.experiment_id < before_id)
    earlier = (
        (row.experiment_id, Change(stored_summary(row), base or ""))
        for row, base in session.execute(statement)
        if row.experiment_id not in exclude
    )
    return rank(change, earlier)


# The experiments with this exact train.py that were run or will be (not cancelled or
# infra-failed): built once (building one costs about what running it does), every submit runs
# it. A train.py is run once per track: another track is other hardware or another preset, where
# the same file measures something else.
_SAME_TRAIN_PY = select(Experiment.id).where(
    Experiment.train_py_blob == bindparam("blob"), Experiment.status.in_(NOT_RERUN_STATUSES)
)
_SAME_TRAIN_PY_BEFORE = _SAME_TRAIN_PY.where(Experiment.id < bindparam("before_id"))
_SAME_ON_TRACK = (
    _SAME_TRAIN_PY.where(Experiment.track_id == bindparam("track_id")).order_by(Experiment.id).limit(1)
)
_SAME_AND_QUEUED = select(
    _SAME_ON_TRACK.scalar_subquery(),
    select(func.count())
    .where(Experiment.agent_id == bindparam("agent_id"), Experiment.status == ExperimentStatus.QUEUED)
    .scalar_subquery(),
)


def find_same_train_py(session: Session, blob: str, track_id: int) -> int | None:
    """The id of an experiment of the track with this exact train.py that was run or will be (not
    cancelled/infra-failed)."""
    return session.scalars(_SAME_ON_TRACK, {"blob": blob, "track_id": track_id}).first()


def same_train_py_and_queued(
    session: Session, blob: str, agent_id: int, track_id: int
) -> tuple[int | None, int]:
    """What a submission checks with the track locked, in one query: `find_same_train_py`, and
    how many experiments the agent has queued (on every track: the limit is the agent's)."""
    params = {"blob": blob, "agent_id": agent_id, "track_id": track_id}
    same, queued = session.execute(_SAME_AND_QUEUED, params).one()
    return same, int(queued or 0)


def find_similar(
    session: Session,
    change: Change,
    blob: str | None,
    *,
    exclude: Iterable[int] = (),
    before_id: int | None = None,
    limit: int = MAX_SIMILAR,
) -> list[SimilarExperiment]:
    """The experiments (other than `exclude`, older than `before_id` when given) whose change
    resembles `change`, or whose train.py is `blob` (identical), most alike first."""
    excluded = set(exclude)
    identical: list[Match] = []
    if blob is not None:
        found = (
            session.scalars(_SAME_TRAIN_PY, {"blob": blob})
            if before_id is None
            else session.scalars(_SAME_TRAIN_PY_BEFORE, {"blob": blob, "before_id": before_id})
        )
        same = Similarity(SimilarityKind.IDENTICAL, 0.0, "the same train.py")
        identical = [Match(i, same) for i in found if i not in excluded]
        excluded |= {match.experiment_id for match in identical}
    matches = sorted(identical + _candidates(session, change, excluded, before_id), key=sort_key)[:limit]
    return _views(session, change, matches)


def _views(session: Session, change: Change, matches: list[Match]) -> list[SimilarExperiment]:
    if not matches:
        return []
    experiments = labelled(session, (m.experiment_id for m in matches))
    tracks = track_names(session, (e.track_id for e, _agent in experiments.values()))
    out = []
    for match in matches:
        e, agent = experiments[match.experiment_id]
        out.append(
            SimilarExperiment(
                experiment_id=e.id,
                track=tracks[e.track_id],
                kind=match.similarity.kind,
                distance=match.similarity.distance,
                detail=match.similarity.detail,
                same_base=e.base_commit == change.base,
                status=e.status,
                decision=e.decision,
                val_bpb=e.val_bpb,
                valid_runs=e.valid_runs,
                effect=e.effect,
                se=e.effect_se,
                agent=agent,
                description=e.description,
                base=e.base_commit,
                commit=e.commit_sha,
            )
        )
    return out


def similar_to_experiment(
    session: Session, experiment: Experiment, *, earlier_only: bool = False, limit: int = MAX_SIMILAR
) -> list[SimilarExperiment]:
    """The experiments whose change resembles this experiment's (its stored summary); none for
    the baseline, which changed nothing."""
    row = session.get(ExperimentChange, experiment.id)
    if row is None or experiment.base_commit is None:
        return []
    return find_similar(
        session,
        Change(stored_summary(row), experiment.base_commit),
        experiment.train_py_blob,
        exclude={experiment.id},
        before_id=experiment.id if earlier_only else None,
        limit=limit,
    )


def similar_earlier(
    session: Session, experiment_id: int, queued: tuple[Change, str] | None
) -> list[SimilarExperiment]:
    """The experiments before `experiment_id` whose change resembles its change: from `queued`
    (its change and train.py blob) when the caller has them at hand, else from its stored summary."""
    if queued is not None:
        change, blob = queued
        return find_similar(session, change, blob, exclude={experiment_id}, before_id=experiment_id)
    experiment = session.get(Experiment, experiment_id)
    assert experiment is not None
    return similar_to_experiment(session, experiment, earlier_only=True)
