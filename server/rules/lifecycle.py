"""Which moves an experiment's and a run's state may make, as two tables, and the checks that every
write of a status goes through.

An experiment is undecided (queued, running) until a decision or an end without one; a decided
experiment (kept, reverted, rebased, stale) never moves again, though its runs may go on (the
best's repeats), except a kept best that one of those runs shows to be non-causal or over its
score bound: it is revoked (reverted). One that ended without a verdict on its change
(cancelled, infra_failed) may be queued again (an admin's retry, an unmeasured best at start).
A run is queued, running, then finished (its result recorded), cancelled or infra_failed; the
last two may be queued again with their experiment.

ORM writes call `move_experiment` / `move_run`; the plain statements of the hot paths (the
claim, recording a result) take their conditions from the same tables (`experiment_sources`) or
check the move before they write (`check_experiment_move`). A move the tables do not allow is a
bug in the server, raised as IllegalMove (never a client's mistake).
"""

from __future__ import annotations

from collections.abc import Mapping

from protocol.states import DECIDED_STATUS, RETRYABLE_STATUSES, ExperimentStatus, RunState
from server.models import Experiment, Run

UNDECIDED = frozenset({ExperimentStatus.QUEUED, ExperimentStatus.RUNNING})
_DECIDED = frozenset(DECIDED_STATUS.values())
_ENDED_WITHOUT_VERDICT = frozenset({ExperimentStatus.CANCELLED, ExperimentStatus.INFRA_FAILED})

EXPERIMENT_MOVES: Mapping[ExperimentStatus, frozenset[ExperimentStatus]] = {
    # Claimed; re-applied onto a newer best before it ran (rebased, stale); cancelled; decided
    # while a run of it waits in the queue again (a confirmation run queued, another finished).
    ExperimentStatus.QUEUED: frozenset({ExperimentStatus.RUNNING} | _DECIDED | _ENDED_WITHOUT_VERDICT),
    # Decided, ended, or back in the queue (a confirmation run queued, a lost lease).
    ExperimentStatus.RUNNING: frozenset({ExperimentStatus.QUEUED} | _DECIDED | _ENDED_WITHOUT_VERDICT),
    **dict.fromkeys(_DECIDED, frozenset()),
    # The one move out of a decision: a kept best whose later run ended in an integrity class is
    # revoked (server.flows.decisions.settle, judge.Action.REVOKE).
    ExperimentStatus.KEPT: frozenset({ExperimentStatus.REVERTED}),
    **dict.fromkeys(RETRYABLE_STATUSES, frozenset({ExperimentStatus.QUEUED})),
}

RUN_MOVES: Mapping[RunState, frozenset[RunState]] = {
    RunState.QUEUED: frozenset({RunState.RUNNING, RunState.CANCELLED}),
    RunState.RUNNING: frozenset(
        {RunState.FINISHED, RunState.SLOWED, RunState.QUEUED, RunState.CANCELLED, RunState.INFRA_FAILED}
    ),
    RunState.FINISHED: frozenset(),
    RunState.SLOWED: frozenset(),
    RunState.CANCELLED: frozenset({RunState.QUEUED}),
    RunState.INFRA_FAILED: frozenset({RunState.QUEUED}),
}


class IllegalMove(RuntimeError):
    """A status write the tables do not allow: a bug in the server."""


def check_experiment_move(current: ExperimentStatus | str, new: ExperimentStatus | str) -> None:
    """Raise IllegalMove unless an experiment may go from `current` to `new` (staying is allowed)."""
    before, after = ExperimentStatus(current), ExperimentStatus(new)
    if after != before and after not in EXPERIMENT_MOVES[before]:
        raise IllegalMove(f"an experiment cannot go from {before} to {after}")


def check_run_move(current: RunState | str, new: RunState | str) -> None:
    """Raise IllegalMove unless a run may go from `current` to `new` (staying is allowed)."""
    before, after = RunState(current), RunState(new)
    if after != before and after not in RUN_MOVES[before]:
        raise IllegalMove(f"a run cannot go from {before} to {after}")


def move_experiment(experiment: Experiment, new: ExperimentStatus) -> None:
    check_experiment_move(experiment.status, new)
    experiment.status = new


def move_run(run: Run, new: RunState) -> None:
    check_run_move(run.status, new)
    run.status = new


def experiment_sources(new: ExperimentStatus) -> frozenset[ExperimentStatus]:
    """The statuses an experiment may move to `new` from, for a statement's WHERE or CASE."""
    return frozenset(status for status, targets in EXPERIMENT_MOVES.items() if new in targets)


def run_sources(new: RunState) -> frozenset[RunState]:
    """The states a run may move to `new` from, for a statement's WHERE."""
    return frozenset(state for state, targets in RUN_MOVES.items() if new in targets)
