"""Applying the judge's verdict when a run's result arrives: the best, confirmation runs, rebases.

Called inside the result's transaction (server/flows/results.py). `judge` (server/rules/judge.py)
decides on plain numbers that server/crud/evidence.py reads; this module applies the verdict: it
moves `best`, queues the candidate's next run or the best's repeats, re-applies a change onto a
new best, or revokes a best caught later.

Locking. A candidate is always compared with its own base's runs: while the base is the best,
that is the best; once the best has moved on, still the base. Whether the base is still the best
only decides what a positive verdict does (keep it, or re-apply it onto the new best), so only
positive verdicts need the best to be fresh:
- Keep, rebase and revoke (judge.NEEDS_FRESH_BEST) are decided again with the track's row
  locked (PostgreSQL; SQLite has one writer anyway) on the fresh row (server/flows/results.py),
  so such decisions are serial: two results that arrive together are decided one after the
  other, and the second sees the `best` the first one left. Only a candidate measured on the
  current best can move it, and only forward (its parent is the best), so `best` always
  fast-forwards and never advances twice from the same base.
- Revert and confirm need no lock: the base's runs and the noise estimate they rest on are what
  they are whether the best moved or not. A confirmation run queued just as the best moved is
  judged again when it returns, and then re-applied onto the new best if still promising.
The runs of one experiment are counted on its locked row, and the noise estimate is pooled again
from all measuring runs with its row locked (server/crud/noise.py), so concurrent results neither
lose a run nor count one twice.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from sqlalchemy.orm import Session

from protocol.events import DECIDED_PAYLOAD, Queued, Reverted
from protocol.states import DECIDED_STATUS, Decision, ExperimentStatus, Rule, RunKind, RunState
from server.context import AppContext
from server.crud.experiments import agent_label, agent_names, by_commit, status_of_commit
from server.crud.runs import cancel_queued_runs, count_runs, queue_runs, queued_on_former_best
from server.crud.similar import find_same_train_py
from server.crud.tracks import (
    TrackRef,
    TrackState,
    current_best,
    last_experiment_id,
    move_best,
    submitted_since,
)
from server.flows.candidates import Candidate, commit_message, queue_candidate
from server.models import AnyRow, Experiment, Run, utcnow
from server.rules.judge import Action, Comparison, Verdict
from server.rules.lifecycle import move_experiment, move_run
from server.trainpy.carry import CACHED, Carried, carried
from server.transaction import Transaction

log = logging.getLogger(__name__)


class Carriable(Protocol):
    """An experiment's change as carrying it onto the best reads it: a row of the result's or the
    carry ahead's statements, or the claim's locked Experiment."""

    @property
    def agent_id(self) -> int | None: ...
    @property
    def description(self) -> str: ...
    @property
    def hypothesis(self) -> str | None: ...
    @property
    def base_commit(self) -> str | None: ...
    @property
    def commit_sha(self) -> str: ...


class Rebasable(Carriable, Protocol):
    """A change with its experiment's id and place in the queue, which a rebase's new experiment
    takes over."""

    @property
    def id(self) -> int: ...
    @property
    def queued_at(self) -> datetime: ...


# How a revoked best's reason begins: changes queued on it are carried onto the restored best, as
# those queued on any former best (reapply_before_running).
REVOKED = "kept, then revoked"


def settle(
    ctx: AppContext, tx: Transaction, track: TrackState, experiment: AnyRow, verdict: Verdict, kind: RunKind
) -> dict[str, object]:
    """Carry out the judge's verdict on the experiment a run's result was for: the experiment's
    new column values (the caller writes them with its own changes), after the effects (the
    best, runs queued or cancelled, git, events). `decision_reason` is among them exactly when
    this run decided something (a verdict, a cancellation, a revocation); a run that only counts
    (Action.COUNT) changes nothing here, and the caller's answer says so. A run presumed slowed
    (Action.RERUN) is run again: one more run of its `kind`, in its experiment's place."""
    if verdict.action is Action.COUNT:
        return {}
    if verdict.action is Action.RERUN:
        (number,) = queue_runs(tx.session, experiment.id, track.id, kind, experiment.queued_at)
        tx.emit(Queued(experiment_id=experiment.id, run=number, why=verdict.reason, track=track.name))
        if experiment.decision is not None or experiment.status in DECIDED_STATUS.values():
            return {}  # a run of the best: it stays decided
        return {"status": ExperimentStatus.QUEUED, "decision_reason": verdict.reason}
    if verdict.action is Action.CANCEL:
        cancel_queued_runs(tx.session, experiment.id, utcnow())
        return {
            "status": ExperimentStatus.CANCELLED,
            "decision_reason": verdict.reason,
            "finished_at": utcnow(),
        }
    if verdict.action is Action.REVOKE:
        return _revoke(ctx, tx, track, experiment, verdict.reason)
    reference_commit = experiment.base_commit if experiment.base_commit is not None else experiment.commit_sha
    changes = _comparison_columns(reference_commit, verdict.comparison)
    return changes | _apply(ctx, tx, track, experiment, verdict)


def _comparison_columns(reference_commit: str, comparison: Comparison | None) -> dict[str, object]:
    if comparison is None:
        return {"best_before_commit": reference_commit}
    return {
        "best_before_commit": reference_commit,
        "best_before_val_bpb": comparison.reference_mean,
        "effect": comparison.effect,
        "effect_se": comparison.se,
        "effect_bound": comparison.upper_bound,
        "compared_runs": comparison.runs,
        "best_runs": comparison.reference_runs,
        "p_value": comparison.p_value,
        "sigma": comparison.sigma,
        "sigma_df": comparison.df,
    }


def _apply(
    ctx: AppContext, tx: Transaction, track: TrackState, experiment: AnyRow, verdict: Verdict
) -> dict[str, object]:
    """Carry out the verdict; the experiment's status, decision and reason, and its event. Keep and
    rebase come with `track` read on its locked row (judge.NEEDS_FRESH_BEST)."""
    decision, reason, rebased_to = Decision.REVERT, verdict.reason, None
    best_after = track.best_commit
    if verdict.action is Action.KEEP:
        _advance_best(ctx, tx, track, experiment)  # its runs go on: it is the best now
        decision, best_after = Decision.KEEP, experiment.commit_sha
    elif verdict.action is Action.REBASE:
        decision, reason, rebased_to = _rebase(ctx, tx, track, experiment, verdict.reason)
    elif verdict.action is Action.CONFIRM:
        (number,) = queue_runs(
            tx.session, experiment.id, track.id, RunKind.CONFIRMATION, experiment.queued_at
        )
        tx.emit(Queued(experiment_id=experiment.id, run=number, why=verdict.reason, track=track.name))
        return {"status": ExperimentStatus.QUEUED, "decision_reason": verdict.reason}
    if decision is not Decision.KEEP:
        cancel_queued_runs(tx.session, experiment.id, utcnow())
    comparison = verdict.comparison
    tx.emit(
        DECIDED_PAYLOAD[decision](
            experiment_id=experiment.id,
            val_bpb=comparison.mean if comparison else None,
            effect=comparison.effect if comparison else None,
            se=comparison.se if comparison else None,
            p_value=comparison.p_value if comparison else None,
            reason=reason,
            best=best_after,
            rebased_to=rebased_to,
        ),
    )
    return {
        "status": DECIDED_STATUS[decision],
        "decision": decision,
        "decision_reason": reason,
        "rebased_to_id": rebased_to,
        "finished_at": utcnow(),
    }


def _rebase(
    ctx: AppContext, tx: Transaction, track: TrackState, experiment: Rebasable, why: str
) -> tuple[Decision, str, int | None]:
    assert track.best_commit is not None and experiment.base_commit is not None
    moved = f"{why} (from {experiment.base_commit[:10]} to {track.best_commit[:10]})"
    (author,) = _agent_labels(tx.session, [experiment])
    carry = _carry_onto_best(ctx, experiment, track.best_commit, author)
    if carry.stale is not None:
        return Decision.STALE, f"{moved}; {carry.stale}", None
    twin = find_same_train_py(tx.session, carry.blob, track.id)
    if twin is not None:
        return Decision.REBASE, f"{moved}; its change on the new best is experiment {twin}", twin
    assert carry.change is not None  # a change that applies has its summary
    requeued = queue_candidate(
        ctx,
        tx,
        Candidate(
            experiment.description,
            experiment.hypothesis,
            base_commit=track.best_commit,
            commit_sha=carry.commit,
            blob=carry.blob,
            change=carry.change,
        ),
        track=TrackRef(track.id, track.name),
        agent_id=experiment.agent_id,
        source="rebase",
        queued_at=experiment.queued_at,
        rebased_from_id=experiment.id,
    )
    return (
        Decision.REBASE,
        f"{moved}; re-applied onto the new best and queued as experiment {requeued.id}",
        requeued.id,
    )


def _carry_onto_best(ctx: AppContext, experiment: Carriable, best_commit: str, author: str) -> Carried:
    """The experiment's change carried onto the best (server/trainpy/carry.py: computed once)."""
    assert experiment.base_commit is not None
    message = commit_message(experiment.description, experiment.hypothesis)
    return carried(
        ctx.repo,
        experiment.base_commit,
        experiment.commit_sha,
        best_commit,
        message,
        author,
        ctx.settings.train_py_limits,
    )


def carry_ahead(ctx: AppContext) -> None:
    """Carry the changes queued on a former best onto their track's best, outside any transaction,
    so that the claims that re-apply them under the lock find them carried (server/trainpy/carry.py). The
    server runs it in the background after each keep (server/main.py)."""
    with ctx.db.read() as session:  # closed before the carrying: git writes can wait for the disk
        queued = queued_on_former_best(session, CACHED)
        authors = _agent_labels(session, queued)
    for experiment, author in zip(queued, authors, strict=True):
        try:
            _carry_onto_best(ctx, experiment, experiment.best, author)
        except Exception:  # only made ahead: the rebase that needs it carries it again
            log.exception("carrying the change of commit %s onto the best failed", experiment.commit_sha)


def reapply_before_running(
    ctx: AppContext, tx: Transaction, track_id: int, experiment_id: int, run_id: int
) -> bool:
    """A change about to run on a former best of its track: re-apply it onto the current best instead.

    Running it on the old best would be wasted (a promising result is re-applied and run again
    anyway), so its change goes onto the current best now: a new experiment takes its place in
    the queue, or it goes stale when the change no longer applies. True when that happened (the
    claimed run is cancelled); False when it should run as it is.
    """
    track = current_best(tx.session, track_id, lock=True)
    experiment = tx.session.get(Experiment, experiment_id, with_for_update=True)
    assert experiment is not None
    if experiment.base_commit in (None, track.best_commit) or experiment.decision is not None:
        return False
    base = status_of_commit(tx.session, experiment.base_commit, track_id)
    was_best = base is not None and (
        base.status == ExperimentStatus.KEPT or (base.decision_reason or "").startswith(REVOKED)
    )
    if not was_best:
        return False  # submitted on a side branch on purpose: it runs there
    decision, reason, rebased_to = _rebase(ctx, tx, track, experiment, "the best moved before it ran")
    now = utcnow()
    move_experiment(experiment, DECIDED_STATUS[decision])
    experiment.decision = decision
    experiment.decision_reason, experiment.rebased_to_id, experiment.finished_at = reason, rebased_to, now
    experiment.best_before_commit = experiment.base_commit
    run = tx.session.get(Run, run_id)
    assert run is not None
    move_run(run, RunState.CANCELLED)
    run.finished_at, run.attempts = now, run.attempts - 1
    tx.emit(
        DECIDED_PAYLOAD[decision](
            experiment_id=experiment.id, reason=reason, best=track.best_commit, rebased_to=rebased_to
        ),
    )
    return True


def _agent_labels(session: Session, experiments: Sequence[Carriable]) -> list[str]:
    """Who each change's commit is by (one query for all of them)."""
    names = agent_names(session, (e.agent_id for e in experiments))
    return [agent_label(names, e.agent_id, gone="agent") for e in experiments]


def _advance_best(ctx: AppContext, tx: Transaction, track: TrackState, experiment: AnyRow) -> None:
    """Make the experiment the best (its runs become the best's runs) and give it its repeats."""
    previous_id = track.best_experiment_id
    now = utcnow()
    _move_best(ctx, tx, track, experiment.commit_sha, experiment.id, now)
    if previous_id is not None and previous_id != experiment.id:
        cancel_queued_runs(tx.session, previous_id, now)  # repeats of a best that is no longer it
    if ctx.settings.decision_rule == Rule.NOISE_AWARE:
        missing = value_runs_due(ctx, experiment.base_commit) - value_runs(
            tx.session, experiment.id, experiment.base_commit
        )
        queue_runs(tx.session, experiment.id, track.id, RunKind.REPEAT, experiment.queued_at, max(0, missing))


def _move_best(
    ctx: AppContext, tx: Transaction, track: TrackState, commit: str, experiment_id: int, now: datetime
) -> None:
    """Point the track's row and its best branch at `commit` (the branch's move is undone if the
    transaction fails); the repeats due from now on count from the newest experiment."""
    previous = track.best_commit
    move_best(tx.session, track.id, commit, experiment_id, last_experiment_id(tx.session), now)
    if previous != commit:
        ctx.repo.set_best(commit, track.branch)
        if previous is not None:
            tx.undo.append(lambda: ctx.repo.set_best(previous, track.branch))


def best_repeats_due(ctx: AppContext, session: Session, track: TrackState) -> int:
    """Repeats of the track's best to queue now: once measured, it is brought to the runs that make
    its value (value_runs_due), and gets one more for every BEST_RERUN_EVERY experiments submitted
    to the track since it became the best (a best that stays long is compared with many
    candidates, so its value should be the most precise)."""
    settings = ctx.settings
    if settings.decision_rule != Rule.NOISE_AWARE or track.best_experiment_id is None:
        return 0
    experiment = session.get(Experiment, track.best_experiment_id)
    if experiment is None or experiment.valid_runs == 0:
        return 0  # not measured yet: its repeats follow its first valid run
    target = value_runs_due(ctx, experiment.base_commit)
    if settings.best_rerun_every:
        since = submitted_since(session, track.id, track.best_since_experiment_id or 0)
        target += since // settings.best_rerun_every
    return max(0, target - value_runs(session, experiment.id, experiment.base_commit))


def calibration_due(ctx: AppContext, runs_made: int, other_workers: bool) -> bool:
    """Whether a worker's next run of a track is a run of the track's best (a calibration run): its
    first run there and every CALIBRATE_EVERY-th after, once another worker runs the track too
    (one worker needs no offset). Every worker then has runs of known code, on which the offsets
    are fitted (server/crud/noise.py, Fleet)."""
    every = ctx.settings.calibrate_every
    return (
        ctx.settings.decision_rule == Rule.NOISE_AWARE
        and bool(every)
        and other_workers
        and runs_made % every == 0
    )


def queue_best_repeats(ctx: AppContext, session: Session, track: TrackState) -> int:
    """Queue the repeats of the track's best that are due now (best_repeats_due); how many were
    queued."""
    due = best_repeats_due(ctx, session, track)
    if due and track.best_experiment_id is not None:
        experiment = session.get(Experiment, track.best_experiment_id)
        assert experiment is not None
        queue_runs(session, experiment.id, track.id, RunKind.REPEAT, experiment.queued_at, due)
    return due


def value_runs_due(ctx: AppContext, base_commit: str | None) -> int:
    """How many runs a new best's value rests on: NOISE_RUNS for the baseline (they measure the
    noise first), BEST_REPEATS repeats for a kept change."""
    return ctx.settings.noise_runs if base_commit is None else ctx.settings.best_repeats


def value_runs(session: Session, experiment_id: int, base_commit: str | None) -> int:
    """The runs (any state) that make a best's value: its measuring runs (noise_crud.is_measuring),
    all of the baseline's, only the repeats of a kept change (crud/evidence.py, _reference_sample)."""
    return count_runs(session, experiment_id, None if base_commit is None else RunKind.REPEAT)


def _revoke(
    ctx: AppContext, tx: Transaction, track: TrackState, experiment: AnyRow, why: str
) -> dict[str, object]:
    """A kept best whose later run (a repeat) ended in an integrity class was never fit to keep:
    the best goes back to the commit it was kept on (its base, whose runs still make its value),
    its queued repeats end, and it is reverted with `why`. Changes queued on it are carried onto
    the restored best when they are claimed, as for any former best."""
    restored = by_commit(tx.session, experiment.base_commit) if experiment.base_commit else None
    assert restored is not None, "a kept experiment's base is an experiment's commit"
    now = utcnow()
    _move_best(ctx, tx, track, restored.commit_sha, restored.id, now)
    cancel_queued_runs(tx.session, experiment.id, now)
    reason = f"{REVOKED}: {why}; the best is experiment {restored.id} again"
    tx.emit(
        Reverted(
            experiment_id=experiment.id, reason=reason, best=restored.commit_sha, val_bpb=experiment.val_bpb
        ),
    )
    return {"status": ExperimentStatus.REVERTED, "decision": Decision.REVERT, "decision_reason": reason}
