"""A real one-node Slurm cluster for the tests: munged, slurmctld and slurmd, in a scratch folder.

Debian's slurm-wlm and munge, started as root (slurmd runs jobs as their users) with a
configuration of their own: private ports, state, spool, logs and munge socket, so nothing of
the machine's own Slurm (if any) is used or touched. No cgroups (process tracking by parent
pid), so it runs in a container too. The node has two stand-in GPUs: character devices named
like NVIDIA's, with /dev/null's device numbers, so that Slurm allocates GPUs, gives each task
its own CUDA_VISIBLE_DEVICES and names the GPU in SLURM_STEP_GPUS exactly as on a GPU node;
there is no GPU behind them, so the tests run CPU workers in that allocation.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

from testkit.processes import free_port, wait_until

DAEMONS = ("munged", "slurmctld", "slurmd")
COMMANDS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo")
GPUS = 2


class SlurmUnavailable(Exception):
    """Slurm cannot run here; the message says what to install or change."""


def check_prerequisites() -> None:
    missing = [name for name in (*DAEMONS, *COMMANDS) if shutil.which(name) is None]
    if missing:
        raise SlurmUnavailable(
            f"the Slurm tests need {', '.join(missing)}: apt-get install slurm-wlm munge "
            "(.ci/run installs them)"
        )
    if os.geteuid() != 0:
        raise SlurmUnavailable(
            "the Slurm tests start slurmd, which runs jobs as their users: run them as root"
        )


class SlurmCluster:
    """One node (this machine) in one partition; `run` calls Slurm's commands on it."""

    def __init__(self) -> None:
        # munged wants every folder above its socket searchable by all: not pytest's tmp (0700).
        self.root = Path(tempfile.mkdtemp(prefix="slurm-test-", dir="/tmp"))
        self.root.chmod(0o755)
        self.node = socket.gethostname().split(".")[0]
        self.etc, self.run_dir, self.log_dir = self.root / "etc", self.root / "run", self.root / "log"
        self.state = self.root / "state"
        for folder in (
            self.etc,
            self.run_dir,
            self.log_dir,
            self.state,
            self.root / "spool",
            self.root / "dev",
        ):
            folder.mkdir()
        self.munge_socket = self.run_dir / "munge.socket"
        self.env = {**os.environ, "SLURM_CONF": str(self.etc / "slurm.conf")}
        self.started = False

    # Starting and stopping -----------------------------------------------------------------------

    def start(self) -> None:
        self._start_munge()
        self._write_config()
        self._daemon(["slurmctld", "-i"], "slurmctld.log")
        self._daemon(["slurmd", "-N", self.node], "slurmd.log")
        wait_until(self._node_idle, 60, f"node {self.node} to be idle ({self.log_dir})")
        self.started = True

    def _start_munge(self) -> None:
        keys = self.root / "munge"
        keys.mkdir(mode=0o700)
        (keys / "munge.key").write_bytes(os.urandom(1024))
        (keys / "munge.key").chmod(0o400)
        self._daemon(
            [
                "munged",
                f"--socket={self.munge_socket}",
                f"--key-file={keys / 'munge.key'}",
                f"--pid-file={self.run_dir / 'munged.pid'}",
                f"--log-file={self.log_dir / 'munged.log'}",
                f"--seed-file={keys / 'munged.seed'}",
            ],
            "munged.log",
        )

    def _write_config(self) -> None:
        devices = self.root / "dev"
        for index in range(GPUS):
            os.mknod(devices / f"nvidia{index}", 0o666 | 0o020000, os.makedev(1, 3))  # a char device
        ctld_port, slurmd_port = free_port(), free_port()
        lines = {
            "ClusterName": "autoresearch-test",
            "SlurmctldHost": f"{self.node}(127.0.0.1)",
            "SlurmctldPort": ctld_port,
            "SlurmdPort": slurmd_port,
            "AuthType": "auth/munge",
            "AuthInfo": f"socket={self.munge_socket}",
            "CredType": "cred/munge",
            "SlurmUser": "root",
            "SlurmdUser": "root",
            "StateSaveLocation": self.state,
            "SlurmdSpoolDir": self.root / "spool",
            "SlurmctldPidFile": self.run_dir / "slurmctld.pid",
            "SlurmdPidFile": self.run_dir / "slurmd.pid",
            "SlurmctldLogFile": self.log_dir / "slurmctld.log",
            "SlurmdLogFile": self.log_dir / "slurmd.log",
            "ProctrackType": "proctrack/linuxproc",
            "TaskPlugin": "task/none",
            "JobAcctGatherType": "jobacct_gather/none",
            "AccountingStorageType": "accounting_storage/none",
            "SchedulerType": "sched/backfill",
            "SelectType": "select/cons_tres",
            "SelectTypeParameters": "CR_Core",
            "MpiDefault": "none",
            "ReturnToService": 2,
            "GresTypes": "gpu",
            "NodeName": f"{self.node} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} Gres=gpu:{GPUS} State=UNKNOWN",
            "PartitionName": "test Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        }
        (self.etc / "slurm.conf").write_text("".join(f"{key}={value}\n" for key, value in lines.items()))
        (self.etc / "gres.conf").write_text(
            f"NodeName={self.node} Name=gpu File={devices}/nvidia[0-{GPUS - 1}]\n"
        )

    def _daemon(self, argv: list[str], log: str) -> None:
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            log_text = (self.log_dir / log).read_text() if (self.log_dir / log).exists() else ""
            raise SlurmUnavailable(f"{argv[0]} did not start: {done.stderr.strip()}\n{log_text[-3000:]}")

    def _node_idle(self) -> bool:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%T"], env=self.env, capture_output=True, text=True, timeout=30
        )
        return out.stdout.strip() == "idle"

    def stop(self) -> None:
        """Cancel every job, stop the daemons and remove the folder; fails if a job would not end."""
        subprocess.run(["scancel", "--full", "--user", "root"], env=self.env, capture_output=True, timeout=30)
        jobs_left: AssertionError | None = None
        try:
            wait_until(lambda: not self.jobs(), 90, "the jobs to end")
        except AssertionError as exc:
            jobs_left = exc
        subprocess.run(["scontrol", "shutdown"], env=self.env, capture_output=True, timeout=30)
        subprocess.run(["munged", "--stop", f"--socket={self.munge_socket}"], capture_output=True, timeout=30)
        for name in ("slurmd", "slurmctld", "munged"):
            self._wait_gone(self.run_dir / f"{name}.pid")
        shutil.rmtree(self.root, ignore_errors=True)
        if jobs_left is not None and self.started:
            raise jobs_left

    @staticmethod
    def _wait_gone(pid_file: Path) -> None:
        """Wait for a daemon that was told to stop; kill it (by its own pid file) if it does not."""
        try:
            pid = int(pid_file.read_text())
        except (OSError, ValueError):
            return  # it removed its pid file on the way out
        with contextlib.suppress(AssertionError):
            wait_until(lambda: not Path(f"/proc/{pid}").exists(), 20, f"{pid_file.stem} to exit")
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    # Slurm's commands ----------------------------------------------------------------------------

    def run(self, *argv: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
        """A Slurm command on this cluster; its stdout (fails with its output when it fails)."""
        done = subprocess.run(
            argv,
            env={**(env or os.environ), "SLURM_CONF": self.env["SLURM_CONF"]},
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def jobs(self) -> list[str]:
        out = subprocess.run(
            ["squeue", "-h", "-o", "%i"], env=self.env, capture_output=True, text=True, timeout=30
        )
        if out.returncode != 0:
            return []  # no controller (it did not start): no jobs
        return out.stdout.split()

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict (JobState, Restarts, ...)."""
        text = self.run("scontrol", "-o", "show", "job", job_id)
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def wait_state(self, job_id: str, states: set[str], timeout: float) -> dict[str, str]:
        return wait_until(
            lambda: (job := self.job(job_id))["JobState"] in states and job,
            timeout,
            f"job {job_id} to be {' or '.join(sorted(states))}",
        )
