"""A worker checks itself before it takes work, and a failure is blamed on the worker or on the
experiment: real server, real workers, real sandboxes."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from harness.config import HarnessSettings
from harness.data_layout import PreparedPaths
from testkit.candidates import bigram
from testkit.processes import Project, wait_until

pytestmark = pytest.mark.heavy

# A candidate that fakes the harness's own "the sandbox could not start" report (the error class
# `sandbox_error`, which may be the worker's fault) from inside train(), through the events pipe
# its process shares with the harness's train entry.
FAKES_SANDBOX_ERROR = """
import json
import os
import sys

from harness.runner.messages import encode


def build_model(ctx):
    import torch

    return torch.nn.Embedding(ctx.vocab_size, ctx.vocab_size)


def train(model, ctx):
    fd = json.loads(sys.argv[1])["events_fd"]
    os.write(fd, encode("error", where="harness", kind="exception", message="fake", traceback="fake"))
    os._exit(1)
"""


def experiment_row(project: Project, experiment_id: int) -> tuple[str, int]:
    """The experiment's status and its first run's attempts."""
    ((status, attempts),) = project.query(
        "SELECT e.status, r.attempts FROM experiments e JOIN runs r ON r.experiment_id = e.id "
        "WHERE e.id = ? AND r.number = 1",
        experiment_id,
    )
    return status, attempts


def test_worker_whose_sandbox_cannot_start_exits_before_registering(project: Project, tmp_path: Path) -> None:
    no_bwrap = tmp_path / "no-bwrap"  # a PATH with git (GitPython needs it) and no bwrap
    no_bwrap.mkdir()
    (no_bwrap / "git").symlink_to(shutil.which("git") or "git")
    worker = project.worker("nobwrap", path=str(no_bwrap))
    assert worker.wait(timeout=180) == 1, worker.log()
    log = worker.log()
    assert "bubblewrap (bwrap) is not installed" in log
    assert "registered as worker" not in log and worker.claimed() == []
    assert project.query("SELECT name FROM workers") == []
    assert project.query("SELECT id FROM leases") == []
    assert experiment_row(project, 1) == ("queued", 0)  # the baseline waits for a worker that can run it


def test_worker_fault_returns_the_experiment_uncounted_and_stops_the_worker(
    project: Project, tmp_path: Path, test_data: tuple[HarnessSettings, PreparedPaths]
) -> None:
    _, paths = test_data
    data_dir = tmp_path / "worker-data"  # this worker's own copy of the prepared data, to break
    copy = data_dir / paths.root.relative_to(paths.root.parents[1])
    shutil.copytree(paths.root, copy)
    worker = project.worker("breaks", "--data-dir", str(data_dir))
    assert project.final(1).status != "queued"  # it works: the baseline ran on it
    worker.wait_for_log("idle: waiting for queued experiments")
    (copy / "val" / "targets.npy").unlink()  # the worker's data breaks while it waits
    with project.agent() as agent:
        second = agent.submit("lr 0.3", train_py=bigram(0.3)).id
    assert worker.wait(timeout=180) == 1, worker.log()
    log = worker.log()
    assert re.search(rf"experiment {second} run 1 \(seed \d+, attempt 1\): claimed", log), log
    assert "this worker cannot run experiments: the prepared data is not usable" in log
    assert experiment_row(project, second) == ("queued", 0)  # its attempt was not used up
    assert project.query("SELECT state FROM leases WHERE experiment_id = ?", second) == [("released",)]


# Two attempts show the same as the default three: each is counted, then the experiment fails.
@pytest.mark.parametrize("project", [{"max_attempts": 2}], indirect=True)
def test_candidate_that_fakes_a_sandbox_error_uses_up_its_own_attempts(project: Project) -> None:
    worker = project.worker("healthy")
    project.final(1)
    with project.agent() as agent:
        fake = agent.submit("fakes a harness error", train_py=FAKES_SANDBOX_ERROR).id
    done = project.final(fake)
    # The worker checked itself after each failure, passed, and so counted the attempt.
    assert (done.status, done.attempts) == ("infra_failed", 2), done
    # The worker logs each release once the server has it: the last may come a moment later.
    released = "released: worker error: RunFault: sandbox_error"
    wait_until(lambda: worker.log().count(released) >= 2, 30, "the last release in the worker's log")
    assert worker.log().count(released) == 2
    assert project.query("SELECT id FROM results WHERE experiment_id = ?", fake) == []
    worker.check_alive()  # a healthy worker goes on
