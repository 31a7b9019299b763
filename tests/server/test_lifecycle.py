"""The tables of allowed status moves (server/rules/lifecycle.py), checked for every pair of states, and
the claim's plain statement against the same table on a real database."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any

import pytest
from sqlalchemy import create_engine, insert, select
from sqlalchemy.exc import StatementError

from protocol.states import DECIDED_STATUS, FINAL_STATUSES, RETRYABLE_STATUSES, ExperimentStatus, RunState
from server.crud.leases import _START_EXPERIMENT
from server.models import EXPERIMENTS, Base, Experiment, Run, utcnow
from server.rules.lifecycle import (
    EXPERIMENT_MOVES,
    RUN_MOVES,
    UNDECIDED,
    IllegalMove,
    check_experiment_move,
    check_run_move,
    experiment_sources,
    move_experiment,
    move_run,
    run_sources,
)


def test_every_status_has_a_row_and_only_known_targets() -> None:
    assert set(EXPERIMENT_MOVES) == set(ExperimentStatus)
    assert set(RUN_MOVES) == set(RunState)
    assert all(targets <= set(ExperimentStatus) for targets in EXPERIMENT_MOVES.values())
    assert all(targets <= set(RunState) for targets in RUN_MOVES.values())


def test_what_the_words_promise() -> None:
    for status in DECIDED_STATUS.values():  # a decision is final, but a kept best may be revoked
        revoked = {ExperimentStatus.REVERTED} if status == ExperimentStatus.KEPT else set()
        assert EXPERIMENT_MOVES[status] == revoked
    for status in RETRYABLE_STATUSES:  # ended without a verdict: only queued again
        assert EXPERIMENT_MOVES[status] == {ExperimentStatus.QUEUED}
    for status in FINAL_STATUSES:  # every final status is reached from both undecided ones
        assert all(status in EXPERIMENT_MOVES[undecided] for undecided in UNDECIDED)
    assert experiment_sources(ExperimentStatus.RUNNING) == {ExperimentStatus.QUEUED}
    assert RUN_MOVES[RunState.FINISHED] == frozenset()  # a recorded result is never undone
    assert run_sources(RunState.FINISHED) == {RunState.RUNNING}


@pytest.mark.parametrize(
    ("table", "check", "kind"),
    [(EXPERIMENT_MOVES, check_experiment_move, ExperimentStatus), (RUN_MOVES, check_run_move, RunState)],
)
def test_every_pair_is_allowed_exactly_when_the_table_says(
    table: Mapping[Any, frozenset[Any]], check: Callable[[Any, Any], None], kind: type[StrEnum]
) -> None:
    for before, after in itertools.product(kind, kind):
        if after == before or after in table[before]:
            check(before, after)
            check(before.value, after.value)  # as read from a plain statement's row
        else:
            with pytest.raises(IllegalMove, match=f"from {before} to {after}"):
                check(before, after)


def test_moves_write_only_what_is_allowed() -> None:
    experiment = Experiment(status=ExperimentStatus.QUEUED)
    move_experiment(experiment, ExperimentStatus.RUNNING)
    move_experiment(experiment, ExperimentStatus.KEPT)
    with pytest.raises(IllegalMove):
        move_experiment(experiment, ExperimentStatus.QUEUED)
    assert experiment.status == ExperimentStatus.KEPT  # unchanged by the refused move
    run = Run(status=RunState.RUNNING)
    move_run(run, RunState.FINISHED)
    with pytest.raises(IllegalMove):
        move_run(run, RunState.QUEUED)
    assert run.status == RunState.FINISHED


def test_the_claims_statement_starts_exactly_the_experiments_the_table_lets_run() -> None:
    """_START_EXPERIMENT (a CASE in one UPDATE on the claim's hot path) on SQLite, for every status."""
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    now = utcnow()
    with engine.begin() as connection:
        for number, status in enumerate(ExperimentStatus, 1):
            row = {
                "id": number,
                "status": status,
                "commit_sha": f"{number:040x}",
                "description": "x",
                "source": "agent",
            }
            connection.execute(insert(EXPERIMENTS), {**row, "queued_at": now, "agent_id": None})
            connection.execute(_START_EXPERIMENT, {"experiment_id": number, "now": now})
        after = dict(connection.execute(select(EXPERIMENTS.c.id, EXPERIMENTS.c.status)).all())
    for number, status in enumerate(ExperimentStatus, 1):
        allowed = status in experiment_sources(ExperimentStatus.RUNNING)
        assert after[number] == (ExperimentStatus.RUNNING if allowed else status), status


def test_a_status_column_reads_back_its_enum_and_refuses_a_word_it_does_not_know() -> None:
    """models.Word: statuses are typed where they are read, and a misspelt word fails at the write
    (on a real SQLite database, through Core as the worker endpoints write them)."""
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    row = {"commit_sha": "a" * 40, "description": "x", "source": "agent", "queued_at": utcnow()}
    with engine.begin() as connection:
        connection.execute(insert(EXPERIMENTS), {**row, "id": 1, "status": ExperimentStatus.QUEUED})
        connection.execute(insert(EXPERIMENTS), {**row, "id": 2, "status": "kept"})  # a word of the enum
        read = connection.execute(select(EXPERIMENTS.c.status).order_by(EXPERIMENTS.c.id)).scalars().all()
    assert read == [ExperimentStatus.QUEUED, ExperimentStatus.KEPT]
    assert all(type(status) is ExperimentStatus for status in read)
    misspelt = {**row, "id": 3, "status": "finished"}
    refused = pytest.raises(StatementError, match="'finished' is not a valid ExperimentStatus")
    with refused, engine.begin() as connection:
        connection.execute(insert(EXPERIMENTS), misspelt)
    with engine.connect() as connection:
        assert connection.execute(select(EXPERIMENTS.c.id)).scalars().all() == [1, 2]
