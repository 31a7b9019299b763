"""What the judge looks at when a run's result arrives, read inside the result's transaction:
the run counted into its experiment's sample (and into the noise estimate when it measures), and
the snapshot (server/rules/judge.py) of the candidate, its reference, its earlier evidence and the noise.

On a fleet every value in the snapshot is corrected by its worker's offset (noise_crud.Fleet,
fitted on the track's measuring runs only), so the judge compares like with like; the
experiments' stored val_bpb stay the runs' own.
"""

from __future__ import annotations

import statistics
from datetime import datetime

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from protocol.result import RunResult
from protocol.states import DECIDED_STATUS, Rule, RunKind, RunState
from server.crud import noise as noise_crud
from server.crud.runs import count_runs
from server.crud.tracks import TrackState
from server.models import EXPERIMENTS, AnyRow
from server.rules.failures import cause
from server.rules.judge import (
    Evidence,
    JudgedRun,
    Noise,
    Reference,
    RuleSettings,
    Sample,
    Slowdown,
    Snapshot,
    run_counts,
)
from server.rules.noise_pool import bounded_mean

# The oldest experiment of a commit on the track (by_commit), as the sample a candidate is compared
# with.
_REFERENCE = (
    select(EXPERIMENTS.c.id, EXPERIMENTS.c.base_commit, EXPERIMENTS.c.valid_runs, EXPERIMENTS.c.val_bpb)
    .where(EXPERIMENTS.c.commit_sha == bindparam("commit"), EXPERIMENTS.c.track_id == bindparam("track_id"))
    .order_by(EXPERIMENTS.c.id)
    .limit(1)
)
_EARLIER = select(EXPERIMENTS.c.base_commit, EXPERIMENTS.c.rebased_from_id).where(
    EXPERIMENTS.c.id == bindparam("id")
)


def count_run(
    session: Session,
    track: TrackState,
    experiment: AnyRow,
    run: AnyRow,
    result: RunResult,
    half_life_h: float | None,
) -> noise_crud.RunStats:
    """The experiment's valid runs with this one (when it counts, judge.run_counts); a measuring
    run is pooled into the noise estimate first, so the snapshot reads the estimate with it."""
    before = noise_crud.RunStats(experiment.valid_runs, experiment.val_bpb, experiment.val_bpb_m2)
    if not run_counts(
        result.status, result.val_bpb, result.device, result.harness_id, track.platform, track.harness_id
    ):
        return before
    assert result.val_bpb is not None
    if noise_crud.is_measuring(experiment.base_commit is None, run.kind):
        # Recorded already, just before this decision: pooled with all the others.
        noise_crud.update_estimate(
            session,
            track.id,
            track.platform or result.device,
            track.harness_id or result.harness_id,
            half_life_h,
        )
    return before.with_run(result.val_bpb)


def slowdown(
    session: Session,
    settings: RuleSettings,
    track: TrackState,
    experiment: AnyRow,
    run: AnyRow,
    result: RunResult,
    worker_id: str,
    now: datetime,
    half_life_h: float | None,
) -> Slowdown | None:
    """What judge.rerun reads of a valid run before it is counted (under the noise-aware rule, with
    RERUN_SLOWED_SIGMA set): a candidate's run against its base's value, a run of the best (or of
    the baseline) against the best's own; None for any other run."""
    if (
        settings.rule != Rule.NOISE_AWARE
        or not settings.rerun_slowed
        or experiment.cancel_requested
        or result.val_bpb is None
        or not run_counts(
            result.status, result.val_bpb, result.device, result.harness_id, track.platform, track.harness_id
        )
    ):
        return None
    decided = experiment.decision is not None or experiment.status in DECIDED_STATUS.values()
    own = experiment.base_commit is None or (decided and run.kind == RunKind.REPEAT)
    if decided and not own:
        return None  # a decided candidate's run in flight: it only counts
    noise = noise_crud.noise(session, track.id, track.platform, track.harness_id)
    sigma = None if noise is None else noise.sigma
    fleet = noise_crud.fleet(session, track.id, track.platform, track.harness_id, half_life_h)
    if own:
        values = fleet.measured(experiment.id)  # this run is not finished yet: not among them
        level = bounded_mean(values, sigma) if values else None
        against = "the best" if experiment.id == track.best_experiment_id else "its own value"
    else:
        base = _reference_sample(session, experiment.base_commit, track, settings.rule, noise, fleet)
        level = base.sample.mean
        against = "the best" if experiment.base_commit == track.best_commit else "its base"
    return Slowdown(
        number=run.number,
        value=result.val_bpb - fleet.offset(worker_id, now),
        level=level,
        against=against,
        sigma=sigma,
        reruns=count_runs(session, experiment.id, state=RunState.SLOWED),
    )


def snapshot(
    session: Session,
    settings: RuleSettings,
    track: TrackState,
    experiment: AnyRow,
    run: AnyRow,
    result: RunResult,
    candidate: noise_crud.RunStats,
    half_life_h: float | None,
) -> Snapshot:
    """Everything judge() looks at. A decided experiment's run is judged on the run alone: its
    reference, earlier evidence and the noise are not read."""
    is_baseline = experiment.base_commit is None
    decided = experiment.decision is not None or experiment.status in DECIDED_STATUS.values()
    noise = None if decided else noise_crud.noise(session, track.id, track.platform, track.harness_id)
    fleet = (
        noise_crud.Fleet()
        if decided
        else noise_crud.fleet(session, track.id, track.platform, track.harness_id, half_life_h)
    )
    reference = (
        Reference(Sample(0, None), measured=False)
        if is_baseline or decided
        else _reference_sample(session, experiment.base_commit, track, settings.rule, noise, fleet)
    )
    reference_commit = experiment.commit_sha if is_baseline else experiment.base_commit
    return Snapshot(
        settings=settings,
        run=JudgedRun(
            number=run.number,
            status=result.status,
            error_class=result.error_class,
            val_bpb=result.val_bpb,
            device=result.device,
            harness_id=result.harness_id,
            cause=cause(result.error_message),
        ),
        platform=track.platform,
        harness_id=track.harness_id,
        candidate=_candidate_sample(session, track, experiment.id, candidate, fleet),
        reference=reference.sample,
        reference_measured=reference.measured,
        reference_is_best=reference_commit == track.best_commit,
        is_baseline=is_baseline,
        earlier=()
        if decided
        else _earlier(session, track, settings.rule, noise, fleet, experiment.rebased_from_id),
        noise=noise,
        decided=decided,
        cancel_requested=bool(experiment.cancel_requested),
        is_best=track.best_experiment_id == experiment.id,
        reruns=0 if decided else count_runs(session, experiment.id, state=RunState.SLOWED),
        reference_provenance=reference.provenance,
    )


def _candidate_sample(
    session: Session,
    track: TrackState,
    experiment_id: int,
    stats: noise_crud.RunStats,
    fleet: noise_crud.Fleet,
) -> Sample:
    """The candidate's valid runs: their mean less the mean offset of the workers that made them."""
    identical = stats.n >= 2 and stats.m2 == 0.0
    if fleet.offsets is None or stats.mean is None:
        return Sample(stats.n, stats.mean, identical)
    rows = noise_crud.valid_runs(session, experiment_id, track.platform, track.harness_id, confirming=False)
    return Sample(len(rows), statistics.fmean(fleet.corrected(rows)), identical)


def _earlier(
    session: Session,
    track: TrackState,
    rule: Rule,
    noise: Noise | None,
    fleet: noise_crud.Fleet,
    rebased_from_id: int | None,
) -> tuple[Evidence, ...]:
    """A re-applied change's confirmation runs on each base it was measured on before, with that
    base's value (the noise-aware rule pools them, judge.compare); nothing under the greedy rule.

    Its screening run there is left out: it was chosen for being low (it passed the screen), and
    counted again here it would make null changes look better than they are.
    """
    evidence: list[Evidence] = []
    while rebased_from_id is not None and rule == Rule.NOISE_AWARE:
        row = session.connection().execute(_EARLIER, {"id": rebased_from_id}).one()
        values = fleet.corrected(
            noise_crud.valid_runs(session, rebased_from_id, track.platform, track.harness_id, confirming=True)
        )
        if values:
            reference = _reference_sample(session, row.base_commit, track, rule, noise, fleet).sample
            evidence.append(Evidence(Sample(len(values), sum(values) / len(values)), reference))
        rebased_from_id = row.rebased_from_id
    return tuple(evidence)


def _reference_sample(
    session: Session, commit: str, track: TrackState, rule: Rule, noise: Noise | None, fleet: noise_crud.Fleet
) -> Reference:
    """The sample a candidate on `commit` is compared with.

    Under the noise-aware rule, a kept change's own runs do not count: they were selected for being
    good (it was kept because they were), so their mean is too low, and every later candidate
    compared with it would look worse than it is (the winner's curse; docs/api.md, "Decisions").
    Its value is its measuring runs (noise_crud.Fleet, corrected): its repeats as the best, or all
    of the baseline's runs; their mean, each run bounded at a few pooled sigmas from their median
    (noise_pool.bounded_mean: one far run would pin the best's value).
    """
    row = session.connection().execute(_REFERENCE, {"commit": commit, "track_id": track.id}).first()
    if row is None:
        return Reference(Sample(0, None), measured=False)
    measured = row.valid_runs > 0
    if rule == Rule.GREEDY:
        return Reference(Sample(row.valid_runs, row.val_bpb), measured)
    values = fleet.measured(row.id)
    sigma = None if noise is None else noise.sigma
    provenance = noise_crud.provenance(
        session, row.id, row.base_commit is None, track.platform, track.harness_id
    )
    sample = Sample(len(values), bounded_mean(values, sigma) if values else None)
    return Reference(sample, measured, provenance)
