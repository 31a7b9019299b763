"""Stopping a real worker: SIGTERM finishes the current experiment; stop-now gives it back."""

from __future__ import annotations

import contextlib
import os
import signal

import pytest

from harness.runner.limits import descendants
from testkit.candidates import bigram
from testkit.processes import Project, WorkerProcess, wait_until

pytestmark = pytest.mark.heavy


@pytest.mark.parametrize("project", [{"time_budget": 10}], indirect=True)
def test_sigterm_finishes_current_experiment_and_takes_no_other(project: Project) -> None:
    with project.agent() as agent:
        second = agent.submit("lr 0.1", train_py=bigram(0.1)).id

    finishing = project.worker("finishing")
    project.wait_training(1, finishing)
    finishing.signal(signal.SIGTERM)
    assert finishing.wait(timeout=120) == 0
    assert finishing.claimed() == [1]  # it did not take the next one
    assert project.experiment(1).result is not None  # the run it had was finished and delivered
    assert project.experiment(second).status == "queued"


# A run long enough that the signal surely lands while it trains.
@pytest.mark.parametrize("project", [{"time_budget": 60}], indirect=True)
def test_stop_now_releases_the_running_experiment(project: Project) -> None:
    stopping = project.worker("stopping", "--stop-now")
    project.wait_training(1, stopping)
    stopping.signal(signal.SIGTERM)
    assert stopping.wait(timeout=30) == 0
    assert stopping.claimed() == [1]
    released = wait_until(
        lambda: (e := project.experiment(1)).status == "queued" and e,
        10,
        "the experiment to be queued",
    )
    assert released.result is None
    assert project.query("SELECT state FROM leases WHERE experiment_id = 1") == [("released",)]
    assert "released" in stopping.log()


@pytest.mark.parametrize("project", [{"time_budget": 60}], indirect=True)
def test_cancel_from_the_server_stops_the_run_and_the_worker_goes_on(project: Project) -> None:
    worker = project.worker("w")
    project.wait_training(1, worker)
    with project.admin() as admin:
        admin.cancel(1)
    worker.wait_for_log(r"the server asked to cancel this experiment; cancelling the run", timeout=30)
    assert project.final(1, timeout=30).status == "cancelled"
    assert project.query("SELECT state FROM leases WHERE experiment_id = 1") == [("released",)]
    worker.wait_for_log(r"idle: waiting for queued experiments", timeout=30)  # back in its claim loop
    worker.check_alive()


def signal_every_process(worker: WorkerProcess, sig: signal.Signals) -> int:
    """Signal the worker and every process below it, as Slurm's scancel and --signal do."""
    assert worker.proc is not None
    pids = descendants(worker.proc.pid)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    return len(pids)


# As long as test_sigterm_finishes_current_experiment_and_takes_no_other's: the signal lands
# while it trains (wait_training), and it then trains the whole budget.
@pytest.mark.parametrize("project", [{"time_budget": 10}], indirect=True)
def test_usr1_to_every_process_finishes_the_run_and_scores_it(project: Project) -> None:
    worker = project.worker("slurm-like", "--stop-now")
    project.wait_training(1, worker)
    assert signal_every_process(worker, signal.SIGUSR1) > 2  # the worker, its sandboxes, the scorer
    assert worker.wait(timeout=120) == 0
    finished = project.experiment(1)
    assert finished.result.status == "ok", finished.result  # the sandboxes ignored it
    assert finished.status == "kept"


@pytest.mark.parametrize("project", [{"time_budget": 20}], indirect=True)
def test_sigterm_to_every_process_releases_the_run_without_a_result(project: Project) -> None:
    worker = project.worker("slurm-like", "--stop-now")
    project.wait_training(1, worker)
    signal_every_process(worker, signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    released = wait_until(
        lambda: (e := project.experiment(1)).status == "queued" and e, 10, "the experiment to be queued"
    )
    assert released.result is None and released.attempts == 0
    assert project.query("SELECT state FROM leases WHERE experiment_id = 1") == [("released",)]
