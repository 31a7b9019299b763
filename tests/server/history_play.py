"""A project's history played through a live server, for the tests of what it shows (near misses,
keep rates, similar experiments, the MCP resources and tools over them): the baseline measured,
then five changes with known outcomes judged by the noise-aware rule."""

from __future__ import annotations

import time

from sqlalchemy import func, select

from protocol.schemas import ExperimentOut
from server.models import Experiment
from tests.server.conftest import BASELINE, Live, sim_worker

NOISE = {"decision_rule": "noise_aware", "noise_runs": 3, "best_rerun_every": 0}
# The server tests' baseline, and a constant far enough from the others (more than a diff's three
# lines of context) that changing it still applies once they changed.
SOURCE = BASELINE + "\n\nDECAY = 0.5\n"


def with_constants(**values: object) -> str:
    source = SOURCE
    for name, value in values.items():
        line = next(line for line in SOURCE.splitlines() if line.startswith(f"{name} = "))
        source = source.replace(line, f"{name} = {value}")
    return source


def play_history(live: Live) -> dict[str, int]:
    """The baseline measured three times (sigma 0.002), then five changes with known outcomes."""
    worker, agent = sim_worker(live), live.client("agent", "alice")
    for value in (1.0, 1.002, 0.998):
        worker.run_next(value)
    ids: dict[str, int] = {}

    def tried(label: str, train_py: str, *values: float | None) -> ExperimentOut:
        ids[label] = agent.submit(label, train_py=train_py).id
        for value in values:
            answer = worker.run_next(value) if value is not None else worker.run_next(None, status="crash")
            assert answer.experiment_id == ids[label]
        return agent.experiment(ids[label])

    near = tried("lr up, near", with_constants(LEARNING_RATE=0.02), 0.9985, 0.9995)  # promising, then not
    assert near.decision == "revert" and near.comparison.runs == 2
    assert tried("lr down, worse", with_constants(LEARNING_RATE=0.005), 1.004).decision == "revert"
    assert tried("decay up, near", with_constants(DECAY=0.8), 0.9995).decision == "revert"
    crashed = SOURCE.replace("def train(model, ctx):\n    raise", "def train(model, ctx):\n    assert")
    assert tried("train body, crash", crashed, None).decision == "revert"
    kept = tried("depth and lr up", with_constants(DEPTH=5, LEARNING_RATE=0.03), 0.990, 0.991)
    assert kept.decision == "keep"
    worker.run_next(0.9905)  # the new best's third run
    summarised(live)
    return ids


def summarised(live: Live, timeout_s: float = 30.0) -> None:
    """Wait until the server's background task has summarised every decided experiment's change."""
    pending = select(func.count()).where(
        Experiment.decision.is_not(None),
        Experiment.base_commit.is_not(None),
        Experiment.changes_parsed.is_(None),
    )
    deadline = time.monotonic() + timeout_s
    while True:
        with live.ctx.db.read() as session:
            if session.scalar(pending) == 0:
                return
        assert time.monotonic() < deadline, "decided experiments were not summarised in time"
        time.sleep(0.1)
