"""deploy/slurm/workers.sbatch on a real one-node Slurm cluster, against a real server.

The script runs as users run it: submitted with sbatch, its #SBATCH lines in force except where
the command line overrides them (two GPUs of the test node, one CPU per task). The node's GPUs
are stand-ins (tests/deploy/slurm_cluster.py), so AUTORESEARCH_DEVICE=cpu makes each task run
`autoresearch work --cpu` in the allocation Slurm made for the GPUs; everything else (one task
per GPU, the worker names, the token, the per-node data folder, the signals, the requeue) is
the GPU path.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.config import HarnessSettings
from harness.data_layout import PreparedPaths
from protocol.schemas import ExperimentOut, ResultOut
from testkit.candidates import bigram
from testkit.processes import InitialisedProject, Project, init_project, serve, wait_until
from tests.deploy.slurm_cluster import GPUS, SlurmCluster
from tests.kit.settings_catalog import REPO
from tests.proc_scan import processes_mentioning

pytestmark = pytest.mark.heavy

SCRIPT = REPO / "deploy" / "slurm" / "workers.sbatch"
# Long enough that a signal surely lands while a run goes on (startup, training or scoring).
TIME_BUDGET = 10.0


@dataclass
class Fleet:
    """A server and the node-local folders the Slurm jobs of one test use."""

    project: Project
    slurm: SlurmCluster
    tmp: Path

    @property
    def node_data(self) -> Path:
        return self.tmp / "node-data"  # DATA_DIR: this node's prepared data and worker state

    def env(self, **changes: str) -> dict[str, str]:
        token_file = self.tmp / "worker-token"
        token_file.write_text(self.project.worker_token + "\n")
        token_file.chmod(0o600)
        settings = self.project.settings
        return {
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",  # this checkout's `autoresearch`
            "HOME": str(self.tmp),
            "AUTORESEARCH_SERVER": self.project.url,
            "AUTORESEARCH_WORKER_TOKEN_FILE": str(token_file),
            "PRESET": settings.preset,
            "DATA_SOURCE": settings.data_source,
            "TIME_BUDGET": str(settings.time_budget),
            "DATA_DIR": str(self.node_data),
            # The installation's secret: the node draws the server's validation sample (docs/operations.md).
            "DATA_SECRET": self.project.server.env["DATA_SECRET"],
            "AUTORESEARCH_DEVICE": "cpu",
            "PYTHONUNBUFFERED": "1",
            **changes,
        }

    def sbatch(self, *options: str, **env: str) -> str:
        """Submit the script (its #SBATCH lines, overridden by `options`); the job id."""
        out = self.slurm.run(
            "sbatch",
            "--parsable",
            f"--gres=gpu:{GPUS}",
            f"--ntasks-per-node={GPUS}",
            "--cpus-per-task=1",
            f"--output={self.tmp}/job-%j.log",
            *options,
            str(SCRIPT),
            env=self.env(**env),
            cwd=self.tmp,
        )
        return out.strip().split(";")[0]

    def log(self, job_id: str) -> str:
        path = self.tmp / f"job-{job_id}.log"
        return path.read_text() if path.exists() else ""

    def leases(self, experiment_id: int) -> list[tuple[str, str]]:
        """(state, worker name) of each lease of the experiment, oldest first."""
        return self.project.query(
            "SELECT l.state, w.name FROM leases l JOIN workers w ON w.id = l.worker_id "
            "WHERE l.experiment_id = ? ORDER BY l.claimed_at",
            experiment_id,
        )

    def worker_names(self) -> set[str]:
        return {name for (name,) in self.project.query("SELECT name FROM workers")}

    def running(self, experiment_id: int, job_id: str) -> None:
        """Wait until a worker of the job holds a lease on the experiment and has sent progress."""

        def going() -> bool:
            assert self.slurm.job(job_id)["JobState"] in {"PENDING", "RUNNING"}, self.log(job_id)
            held = any(state == "active" for state, _name in self.leases(experiment_id))
            return held and bool(self.project.progress(experiment_id))

        wait_until(going, 180, f"experiment {experiment_id} to run in job {job_id}")

    def measured(self, experiment_id: int, job_id: str) -> ExperimentOut:
        def done() -> ExperimentOut | None:
            experiment = self.project.experiment(experiment_id)
            if experiment.result is not None:
                return experiment
            assert self.slurm.job(job_id)["JobState"] in {"PENDING", "RUNNING"}, self.log(job_id)
            return None

        return wait_until(done, 180, f"experiment {experiment_id} to be measured by job {job_id}")

    def queued_again(self, experiment_id: int) -> ExperimentOut:
        return wait_until(
            lambda: (e := self.project.experiment(experiment_id)).status == "queued" and e,
            30,
            f"experiment {experiment_id} to be back in the queue",
        )


def budget_settings(test_data: tuple[HarnessSettings, PreparedPaths]) -> HarnessSettings:
    return test_data[0].model_copy(update={"time_budget": TIME_BUDGET})


@pytest.fixture(scope="module")
def initialised(
    tmp_path_factory: pytest.TempPathFactory, test_data: tuple[HarnessSettings, PreparedPaths]
) -> InitialisedProject:
    """A project with a cheap bigram baseline, made once and copied for each test."""
    return init_project(tmp_path_factory.mktemp("slurm-project"), budget_settings(test_data), bigram(0.05))


@pytest.fixture
def fleet(
    slurm: SlurmCluster,
    tmp_path: Path,
    initialised: InitialisedProject,
    test_data: tuple[HarnessSettings, PreparedPaths],
) -> Iterator[Fleet]:
    settings = budget_settings(test_data)
    # A lease long enough that only a release (never an expiry) can requeue a run in these tests.
    project = serve(initialised.copy_to(tmp_path), settings, lease_seconds=120.0)
    try:
        yield Fleet(project, slurm, tmp_path)
    finally:
        for job_id in slurm.jobs():
            slurm.run("scancel", job_id)
        wait_until(lambda: not slurm.jobs(), 90, "the test's jobs to end")
        project.close()


def scored(result: ResultOut | None) -> bool:
    """A run the harness trained and scored to the end (not killed, cancelled or timed out).

    `over_budget` counts: on a busy test machine the bigram's steps can slow down past the
    budget's tolerance, and the harness still measures the run in full.
    """
    return result is not None and result.status in {"ok", "over_budget"} and result.val_bpb is not None


def script_signal() -> str:
    """The signal the script asks Slurm to send before the time limit (--signal=SIG@seconds)."""
    (name,) = re.findall(r"^#SBATCH --signal=(?:B:)?(\w+)@\d+$", SCRIPT.read_text(), re.MULTILINE)
    return name


def test_a_job_measures_submissions_survives_a_requeue_and_gives_its_run_back_on_scancel(
    fleet: Fleet,
) -> None:
    """Slow (60 to 100 s) because it is one job's whole life on a real Slurm: two workers start,
    measure the baseline, are requeued mid-run (each run must be underway, TIME_BUDGET 10 s),
    start again and measure both, then are cancelled mid-run. Each stage waits on Slurm and on
    real sandboxed runs; splitting it would start the cluster and the workers again per stage."""
    slurm, project, node = fleet.slurm, fleet.project, fleet.slurm.node
    job = fleet.sbatch()
    with project.agent() as agent:
        submitted = [agent.submit(f"lr {lr}", train_py=bigram(lr)).id for lr in (0.1, 0.2)]

    # One worker per GPU, named after the node's GPU that Slurm gave its task.
    gpu_workers = {f"{node}-gpu{index}" for index in range(GPUS)}
    wait_until(
        lambda: fleet.worker_names() == gpu_workers, 180, f"the workers to register ({fleet.log(job)})"
    )
    # The token came from the file: it is on no command line and not in Slurm's saved job state.
    token = project.worker_token
    assert not processes_mentioning(token)
    saved = [path for path in slurm.state.rglob("*") if path.is_file()]
    assert saved and not [path for path in saved if token.encode() in path.read_bytes()]
    assert token not in fleet.log(job)
    # One prepared data folder on the node, which both workers use.
    assert [path.name for path in (fleet.node_data / "prepared").iterdir()] == ["speeches-v512"]
    assert fleet.log(job).count(f"data ready in {fleet.node_data}/prepared/speeches-v512") == GPUS

    baseline = fleet.measured(1, job).result
    assert scored(baseline), baseline

    # Requeue (what preemption does to a --requeue job) while both workers run an experiment.
    for experiment_id in submitted:
        fleet.running(experiment_id, job)
    slurm.run("scontrol", "requeue", job)
    for experiment_id in submitted:
        given_back = fleet.queued_again(experiment_id)
        assert given_back.result is None and given_back.attempts == 0  # released, not counted
        assert [state for state, _name in fleet.leases(experiment_id)] == ["released"]
    assert slurm.wait_state(job, {"PENDING"}, 90)["Restarts"] == "1"
    # Slurm holds a requeued batch job for two minutes (its BeginTime); the test does not wait.
    slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now")
    for experiment_id in submitted:
        result = fleet.measured(experiment_id, job).result
        assert scored(result), result
        (first, second) = fleet.leases(experiment_id)
        assert first[0] == "released" and second[0] == "finished" and second[1] in gpu_workers
    assert fleet.worker_names() == gpu_workers  # the same workers came back
    assert fleet.log(job).count(f"autoresearch workers: job {job} on") == 2  # one log, both runs

    # scancel while a worker runs an experiment: it goes back to the queue, uncounted.
    with project.agent() as agent:
        last = agent.submit("lr 0.3", train_py=bigram(0.3)).id
    fleet.running(last, job)
    slurm.run("scancel", job)
    assert slurm.wait_state(job, {"CANCELLED"}, 90)
    wait_until(lambda: not processes_mentioning(str(fleet.node_data)), 30, "the job's processes to end")
    # Once the job is gone: back in the queue, uncounted, released by its worker. (The other
    # worker may have claimed it between its release and its own stop, and released it too, so
    # the leases are looked at only when no worker is left.)
    given_back = fleet.queued_again(last)
    assert given_back.result is None and given_back.attempts == 0
    assert {state for state, _name in fleet.leases(last)} == {"released"}
    assert "released: worker stopping now" in fleet.log(job)
    # Nothing lost: every result is recorded, none waits undelivered in a worker's spool.
    assert all(scored(project.experiment(e).result) for e in (1, *submitted))
    assert not list(fleet.node_data.glob("workers/*/spool/pending/*"))


def test_the_time_limit_signal_lets_the_workers_finish_their_runs(fleet: Fleet) -> None:
    """The signal the script asks for before the time limit (--signal), sent as Slurm sends it:
    to every process of the job's steps. The run is measured, and the job ends early."""
    job = fleet.sbatch()
    fleet.running(1, job)
    fleet.slurm.run("scancel", f"--signal={script_signal()}", job)
    result = fleet.measured(1, job).result
    assert scored(result), result  # no sandbox was killed by the signal
    assert fleet.slurm.wait_state(job, {"COMPLETED"}, 90)["ExitCode"] == "0:0"
    assert "SIGUSR1: finishing the current experiment, then exiting" in fleet.log(job)


def test_the_script_refuses_a_token_file_others_can_read_and_a_job_without_gpus(fleet: Fleet) -> None:
    exposed = fleet.tmp / "exposed-token"
    exposed.write_text(fleet.project.worker_token)
    exposed.chmod(0o644)
    open_token = fleet.sbatch(AUTORESEARCH_WORKER_TOKEN_FILE=str(exposed))
    no_gpus = fleet.sbatch("--gres=none", AUTORESEARCH_DEVICE="gpu")
    for job_id in (open_token, no_gpus):
        assert fleet.slurm.wait_state(job_id, {"FAILED"}, 60)["ExitCode"] == "1:0"
    assert f"{exposed} can be read by others: chmod 600 it" in fleet.log(open_token)
    assert "the job has no GPUs: submit with --gres=gpu:N" in fleet.log(no_gpus)
    assert not fleet.worker_names()  # no worker started
