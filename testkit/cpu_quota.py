"""A worker on a CPU of known speed: its own cgroup, for it and every process it starts later.

Tests of decisions on a fleet need workers whose speeds differ by a known amount, whatever else
the machine runs: at a fixed time budget a worker with less CPU trains fewer tokens, as a slower
GPU does (tests/worker/test_fleet_end_to_end.py). `cpu_group` puts a process into a cgroup of
its own with a large CPU weight, so the rest of the test suite cannot take its CPU, and with a
quota (`share` of one CPU) when given: cgroup v2's `cpu.weight` and `cpu.max` where the unified
hierarchy has the cpu controller, else v1's `cpu` hierarchy (`cpu.shares`, `cpu.cfs_quota_us`).
The harness puts each sandbox in cgroups of its own only in the pids, memory and cpuacct
hierarchies (harness/runner/limits.py), so a sandbox stays in the cpu cgroup of its worker.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
WEIGHT = 100  # times the default weight (cgroup v2: its most): the rest of the suite cannot take its CPU


def _v2_parent() -> Path | None:
    controllers = CGROUP_ROOT / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        return CGROUP_ROOT
    return None


def available() -> bool:
    """Whether this process may make a cgroup with a CPU quota here (root, cgroup v1 or v2)."""
    parent = _v2_parent() or CGROUP_ROOT / "cpu"
    return os.geteuid() == 0 and parent.is_dir() and os.access(parent, os.W_OK)


@contextlib.contextmanager
def cpu_group(pid: int, name: str, share: float | None = None) -> Iterator[Path]:
    """Process `pid` (and what it starts from now on) in a cgroup of its own with WEIGHT times the
    default CPU weight, capped at `share` of one CPU when given, while the context lasts; the
    cgroup's folder. It is removed after, once its processes have ended (the caller stops them
    inside the context)."""
    v2 = _v2_parent()
    folder = (v2 or CGROUP_ROOT / "cpu") / name
    folder.mkdir()
    try:
        quota = str(int(share * PERIOD_US)) if share is not None else None
        if v2 is not None:
            (folder / "cpu.weight").write_text(str(100 * WEIGHT))
            (folder / "cpu.max").write_text(f"{quota or 'max'} {PERIOD_US}")
        else:
            (folder / "cpu.shares").write_text(str(1024 * WEIGHT))
            (folder / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (folder / "cpu.cfs_quota_us").write_text(quota or "-1")
        (folder / "cgroup.procs").write_text(str(pid))
        yield folder
    finally:
        for _ in range(100):  # its processes may take a moment to be reaped
            with contextlib.suppress(OSError):
                folder.rmdir()
                break
            time.sleep(0.05)
