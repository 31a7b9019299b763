"""Real processes for the worker tests and bench/worker_idle.py: the server (`autoresearch serve`,
uvicorn) on a free port with SQLite and a research repo in a temporary folder, and workers
started as `autoresearch work --cpu`, all on one prepared data folder.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from client import Client
from harness.config import HarnessSettings
from harness.data.validation import installation_secret
from protocol.result import ProgressEvent
from protocol.schemas import ExperimentOut
from protocol.states import FINAL_STATUSES

REPO_ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "cli.main"]
DATABASE = "server.db"
CLAIMED = r"experiment (\d+) run \d+ \(seed \d+, attempt \d+\): claimed"  # worker/main.py logs each claim so
RESEARCH_REPO = "research.git"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll `condition` until it returns something truthy; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@dataclass
class ServerProcess:
    env: dict[str, str]
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps writing to it
        self.proc = subprocess.Popen(
            [*CLI, "serve", "--port", str(self.port)], env=self.env, cwd=REPO_ROOT, stdout=log, stderr=log
        )
        with httpx.Client(timeout=2) as http:  # one for the whole wait (each builds an SSL context)
            wait_until(
                lambda: self._healthy(http), 60, f"the server on port {self.port} (log: {self.log_path})"
            )

    def _healthy(self, http: httpx.Client) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(
                f"the server exited with {self.proc.returncode}:\n{self.log_path.read_text()}"
            )
        try:
            return http.get(f"{self.url}/api/v1/healthz").status_code == 200
        except httpx.TransportError:
            return False

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Stop the server (SIGTERM: a graceful shutdown, which waits for open long polls)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@dataclass
class WorkerProcess:
    name: str
    args: list[str]
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps writing to it
        self.proc = subprocess.Popen(
            [*CLI, "work", *self.args], env=self.env, cwd=REPO_ROOT, stdout=log, stderr=log
        )
        return self

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"worker {self.name} exited with {self.proc.returncode}:\n{self.log()}")

    def wait_for_log(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        def found() -> re.Match[str] | None:
            match = re.search(pattern, self.log())
            if match is None:
                self.check_alive()
            return match

        return wait_until(found, timeout, f"worker {self.name} to log {pattern!r}")

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def claimed(self) -> list[int]:
        """Experiment ids this worker claimed, in order (from its log)."""
        return [int(m) for m in re.findall(CLAIMED, self.log())]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Project:
    """One server with its own database and research repo, and the workers started for it."""

    tmp: Path
    settings: HarnessSettings
    server: ServerProcess
    worker_token: str
    agent_token: str
    admin_token: str
    workers: list[WorkerProcess] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url

    def agent(self) -> Client:
        return Client(self.url, self.agent_token)

    def admin(self) -> Client:
        return Client(self.url, self.admin_token)

    def worker(self, name: str, *extra: str, path: str | None = None) -> WorkerProcess:
        """Start `autoresearch work --cpu` as `name` (with `path` as its PATH, when given)."""
        env = {**self.server.env, "AUTORESEARCH_WORKER_TOKEN": self.worker_token}
        if path is not None:
            env["PATH"] = path
        args = [
            "--server",
            self.url,
            "--cpu",
            "--name",
            name,
            "--preset",
            self.settings.preset,
            "--data-dir",
            str(self.settings.data_dir),
            "--state-dir",
            str(self.tmp / "workers" / name),
            *extra,
        ]
        # One log per process, also when a worker is restarted under the same name.
        worker = WorkerProcess(name, args, env, self.tmp / f"{name}-{len(self.workers)}.log")
        self.workers.append(worker)
        return worker.start()

    def experiment(self, experiment_id: int) -> ExperimentOut:
        with self.agent() as client:
            return client.experiment(experiment_id)

    def final(self, experiment_id: int, timeout: float = 180) -> ExperimentOut:
        """The experiment once it reached a final state; fails early if no worker is left alive."""

        def finished() -> ExperimentOut | None:
            experiment = self.experiment(experiment_id)
            if experiment.status in FINAL_STATUSES:
                return experiment
            running = [w for w in self.workers if w.proc is not None and w.proc.poll() is None]
            if not running:
                logs = "\n".join(f"--- {w.name}:\n{w.log()[-3000:]}" for w in self.workers)
                raise AssertionError(
                    f"experiment {experiment_id} is {experiment.status}, no worker runs:\n{logs}"
                )
            return None

        return wait_until(finished, timeout, f"experiment {experiment_id} to finish", interval=0.3)

    def wait_training(self, experiment_id: int, worker: WorkerProcess, timeout: float = 120) -> None:
        """Wait until the server has progress showing `worker` training the experiment; fails at
        once if the run ended without any (a loaded machine can finish a 3 s run between two
        progress calls: a test that acts while a run trains asks for a longer time_budget)."""

        def training() -> bool:
            worker.check_alive()
            if any(event.fraction > 0 for event in self.progress(experiment_id)):
                return True
            if self.experiment(experiment_id).status in FINAL_STATUSES:
                raise AssertionError(
                    f"experiment {experiment_id} finished before any progress reached the server "
                    f"(time_budget {self.settings.time_budget} s is too short for this test)"
                )
            return False

        wait_until(training, timeout, f"experiment {experiment_id} to be training on worker {worker.name}")

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        """Rows from the server's SQLite database, opened read-only (to check what it recorded)."""
        with sqlite3.connect(f"file:{self.tmp / DATABASE}?mode=ro", uri=True) as db:
            return db.execute(sql, args).fetchall()

    def progress(self, experiment_id: int) -> list[ProgressEvent]:
        with self.agent() as client:
            return client.progress(experiment_id).events

    def close(self) -> None:
        """Kill the workers and the server (its state is thrown away)."""
        for worker in self.workers:
            worker.stop()
        self.server.stop(signal.SIGKILL)


def run_cli(env: dict[str, str], *args: str) -> str:
    """Run an `autoresearch` command; its stdout (fails with its output when it fails)."""
    out = subprocess.run([*CLI, *args], env=env, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, f"autoresearch {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


@dataclass(frozen=True)
class InitialisedProject:
    """The database and research repo made by `autoresearch init` in `folder`, and its tokens."""

    folder: Path
    worker_token: str
    agent_token: str

    def copy_to(self, folder: Path) -> InitialisedProject:
        """The same project in another folder (a fresh copy of the database and the repo)."""
        shutil.copy2(self.folder / DATABASE, folder / DATABASE)
        shutil.copytree(self.folder / RESEARCH_REPO, folder / RESEARCH_REPO)
        return replace(self, folder=folder)


def server_env(folder: Path, settings: HarnessSettings, **extra: str) -> dict[str, str]:
    """The server's environment. The worker tests judge each experiment on one run (the greedy
    rule), so that what they run is what they submit; tests of the noise-aware rule set
    DECISION_RULE themselves. DATA_SECRET is the prepared data's, so that a worker preparing its
    own copy elsewhere draws the same validation sample, as an installation's hosts do."""
    return {
        **os.environ,
        "PRESET": settings.preset,
        "DATA_SOURCE": settings.data_source,
        "DATA_DIR": str(settings.data_dir),
        "DATA_SECRET": installation_secret(Path(settings.data_dir), None).decode(),
        "TIME_BUDGET": str(settings.time_budget),  # may differ from the preset's (the bench's --time-budget)
        "DATABASE_URL": f"sqlite:///{folder / DATABASE}",
        "RESEARCH_REPO": str(folder / RESEARCH_REPO),
        "PYTHONUNBUFFERED": "1",
        "DECISION_RULE": "greedy",
        **extra,
    }


def init_project(folder: Path, settings: HarnessSettings, baseline_train_py: str) -> InitialisedProject:
    """`autoresearch init` with `baseline_train_py` as experiment 1, and a worker and an agent token."""
    env = server_env(folder, settings)
    baseline = folder / "baseline_train.py"
    baseline.write_text(baseline_train_py)
    program = folder / "program.md"
    program.write_text("# Worker processes\n\nTune LEARNING_RATE.\n")
    run_cli(env, "init", "--train-py", str(baseline), "--program-md", str(program))
    worker_token = run_cli(env, "token", "create", "--kind", "worker", "--name", "workers").strip()
    agent_token = run_cli(env, "token", "create", "--kind", "agent", "--name", "agent-1").strip()
    return InitialisedProject(folder, worker_token, agent_token)


def serve(
    initialised: InitialisedProject, settings: HarnessSettings, lease_seconds: float, **extra: str
) -> Project:
    """Start the server on the project (with an admin token, and `extra` settings, in its environment)."""
    admin_token = secrets.token_urlsafe(24)
    env = server_env(
        initialised.folder,
        settings,
        LEASE_SECONDS=str(lease_seconds),
        LEASE_SWEEP_SECONDS="0.5",
        ADMIN_TOKEN=admin_token,
        **extra,
    )
    server = ServerProcess(env, free_port(), initialised.folder / "server.log")
    server.start()
    return Project(
        initialised.folder, settings, server, initialised.worker_token, initialised.agent_token, admin_token
    )
