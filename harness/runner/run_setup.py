"""A run's folder, limits and train sandbox, made at the start of a run or ahead of it.

A worker runs experiments back to back. With `keep_warm`, the runner prepares the next run's
train sandbox (at idle priority) as soon as the current one has trained, so the next experiment
skips the interpreter start and `import torch`. The spare runs only harness code until it is
given a candidate; it is used only by a run with the same settings, device, sandbox mode and work
root, and is discarded (killed, its folder and cgroups removed) otherwise, by
`close_warm_sandbox()`, or at interpreter exit.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from harness.runner.limits import Limits, default_limits, remove_cgroups
from harness.runner.train_phase import TrainJob, TrainSandbox


@dataclass(frozen=True)
class PreparedRun:
    key: str  # what a run must match to use it
    run_dir: Path  # candidate/, work/, weights/
    limits: Limits  # their cgroup prefix names this run
    sandbox: TrainSandbox


_spare: PreparedRun | None = None
_lock = threading.Lock()


def prepare_run(key: str, job: TrainJob, work_root: Path | None, idle: bool) -> PreparedRun:
    """A new run folder and a started train sandbox for `job` (whose paths are filled in here)."""
    run_id = uuid.uuid4().hex[:12]
    limits = default_limits(job.settings.memory_limit_gb, run_id)
    run_dir = Path(tempfile.mkdtemp(prefix=f"autoresearch-run-{run_id}-", dir=work_root))
    try:
        for folder in ("candidate", "work", "weights"):
            (run_dir / folder).mkdir()
        job = replace(job, candidate_dir=run_dir / "candidate", work_dir=run_dir / "work", limits=limits)
        return PreparedRun(key=key, run_dir=run_dir, limits=limits, sandbox=TrainSandbox(job, idle))
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        remove_cgroups(limits.cgroup_prefix)
        raise


def discard(run: PreparedRun) -> None:
    """End the run's sandbox and remove its folder and cgroups."""
    run.sandbox.close()
    shutil.rmtree(run.run_dir, ignore_errors=True)
    remove_cgroups(run.limits.cgroup_prefix)


def take_spare(key: str) -> PreparedRun | None:
    """The spare prepared for `key`, if there is one and it is still alive."""
    global _spare
    with _lock:
        spare, _spare = _spare, None
    if spare is not None and spare.key == key and spare.sandbox.alive():
        return spare
    if spare is not None:
        discard(spare)
    return None


def keep_spare(run: PreparedRun) -> None:
    global _spare
    with _lock:
        old, _spare = _spare, run
    if old is not None:
        discard(old)


def close_warm_sandbox() -> None:
    """Discard the spare train sandbox, if any (e.g. when a worker stops)."""
    global _spare
    with _lock:
        spare, _spare = _spare, None
    if spare is not None:
        discard(spare)


atexit.register(close_warm_sandbox)
