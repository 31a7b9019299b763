"""A fleet with a slow worker, end to end: a real server (noise-aware rule, worker offsets on) and
two real workers running real sandboxed train.py files on the `test` preset, each on a CPU of
known speed whatever else the machine runs (testkit/cpu_quota.py): one has a CPU of its own, the
other SHARE of another, so that it takes fewer steps in the time budget and every run it makes
reads worse, as a slower GPU's do.

The candidates train a bigram for the whole budget (testkit.candidates.bigram_whole_budget), so
what a run scores depends on the steps its machine took. The server must estimate the slow
worker's offset (worse, by about what its runs read worse) from its runs of known code (the
baseline's runs and calibration runs of the best) and keep no do-nothing change whichever worker
ran it.
"""

from __future__ import annotations

import contextlib
import sqlite3
import statistics
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.config import HarnessSettings
from harness.data_layout import PreparedPaths
from testkit import cpu_quota
from testkit.candidates import bigram_whole_budget
from testkit.processes import CLAIMED, DATABASE, Project, init_project, serve
from tests.fixtures_data import test_data  # noqa: F401  (session fixture)

pytestmark = [
    pytest.mark.heavy,
    pytest.mark.skipif(not cpu_quota.available(), reason="needs root and a cgroup cpu controller"),
]

LR = 0.003  # far from converged after a budget's steps: fewer steps read clearly worse
SHARE = 0.5  # of its CPU, for the slow worker: its runs read clearly worse


def measuring_runs(project: Project) -> list[tuple[str, float]]:
    """(worker, val_bpb) of the valid runs of known code: the baseline's and the best's repeats
    (calibration runs among them), read from the server's database."""
    with contextlib.closing(sqlite3.connect(project.tmp / DATABASE)) as db:
        return db.execute(
            "SELECT workers.name, results.val_bpb FROM results JOIN runs ON runs.id = results.run_id "
            "JOIN workers ON workers.id = results.worker_id JOIN experiments ON experiments.id = "
            "results.experiment_id WHERE results.val_bpb IS NOT NULL AND runs.status = 'finished' "
            "AND (experiments.base_commit IS NULL OR runs.kind = 'repeat')"
        ).fetchall()


@pytest.fixture
def project(tmp_path: Path, test_data: tuple[HarnessSettings, PreparedPaths]) -> Iterator[Project]:  # noqa: F811
    settings, _paths = test_data
    initialised = init_project(tmp_path, settings, bigram_whole_budget(LR))
    project = serve(
        initialised,
        settings,
        lease_seconds=30,
        DECISION_RULE="noise_aware",
        NOISE_RUNS="4",
        BEST_REPEATS="2",
        MAX_RUNS="3",
        CALIBRATE_EVERY="2",
        BEST_RERUN_EVERY="0",
        # As in test_decisions_end_to_end.py: a null change is not kept by a 5 % chance.
        ALPHA="0.001",
    )
    try:
        yield project
    finally:
        project.close()


def test_a_slow_workers_offset_is_estimated_and_no_do_nothing_change_is_kept(project: Project) -> None:
    """The slow worker starts first, so its first run is one of the baseline's (the gate hands out
    nothing else before the best is measured), and every 2nd run after is a calibration run
    (CALIBRATE_EVERY=2): it has the two runs of known code an offset needs by its third run."""
    slow = project.worker("slow")
    assert slow.proc is not None
    tag = uuid.uuid4().hex[:8]
    fast_cpu, slow_cpu = cpu_quota.cpus()[:2]
    with contextlib.ExitStack() as groups:
        groups.enter_context(cpu_quota.cpu_group(slow.proc.pid, f"autoresearch-slow-{tag}", slow_cpu, SHARE))
        with project.agent() as agent:
            nulls = [
                agent.submit(f"a comment {i}", train_py=bigram_whole_budget(LR) + f"# comment {i}\n").id
                for i in range(2)
            ]
            slow.wait_for_log(CLAIMED)
            fast = project.worker("fast")
            assert fast.proc is not None
            groups.enter_context(cpu_quota.cpu_group(fast.proc.pid, f"autoresearch-fast-{tag}", fast_cpu))
            decided = [project.final(i, timeout=300) for i in nulls]
            (estimate,) = agent.noise().estimates
        project.close()
    by_worker: dict[str, list[float]] = {}
    for name, value in measuring_runs(project):
        by_worker.setdefault(name, []).append(value)
    print("runs of known code by worker:", by_worker, "noise:", estimate)
    print("decisions:", [(d.id, d.status, d.reason) for d in decided])
    assert {name: len(values) >= 2 for name, values in by_worker.items()} == {"fast": True, "slow": True}
    read_worse = statistics.fmean(by_worker["slow"]) - statistics.fmean(by_worker["fast"])
    assert read_worse > 0  # fewer steps in the budget: worse
    offset = estimate.offsets["slow"] - estimate.offsets["fast"]
    # Shrunk towards 0 by empirical Bayes, the more the fewer runs each worker has and the noisier
    # they are: 0.60 to 0.99 of what they read on a quiet machine, 0.23 in CI, where the suite's
    # other process makes the runs spread with sigma 0.42 against 0.12 here alone.
    assert 0 < offset < 1.5 * read_worse
    assert all(d.status != "kept" for d in decided), decided
