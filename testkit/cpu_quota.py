"""A worker on a CPU of known speed: its own cgroups, for it and every process it starts later.

Tests of decisions on a fleet need workers whose speeds differ by a known amount, whatever else
the machine runs: at a fixed time budget a worker with less CPU trains fewer tokens, as a slower
GPU does (tests/worker/test_fleet_end_to_end.py). `cpu_group` puts a process into cgroups of its
own: pinned to one CPU (cpuset), with a large CPU weight, so the rest of the test suite cannot
take that CPU, and with a quota (`share` of the CPU) when given: cgroup v2's `cpuset.cpus`,
`cpu.weight` and `cpu.max` where the unified hierarchy has those controllers, else v1's `cpuset`
and `cpu` hierarchies (`cpu.shares`, `cpu.cfs_quota_us`).

Why pinned: a quota is one pool for the group across all CPUs. A worker starts its scorer and
model sandboxes at idle priority while a run trains (docs/runner.md), and on a second CPU they
used the pool as fast as the training did: a worker with a quota of one CPU trained with about
half of one while they imported torch, so its runs read no better than those of a worker with
half a CPU (docs/benchmarks.md, "Research night", the row of a real slow worker). On one CPU,
idle priority yields to the training.

The harness puts each sandbox in cgroups of its own only in the pids, memory and cpuacct
hierarchies (harness/runner/limits.py), so a sandbox stays in its worker's cpu and cpuset groups.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
WEIGHT = 100  # times the default weight (cgroup v2: its most): the rest of the suite cannot take its CPU


def _v2_parent() -> Path | None:
    controllers = CGROUP_ROOT / "cgroup.controllers"
    if controllers.exists() and {"cpu", "cpuset"} <= set(controllers.read_text().split()):
        return CGROUP_ROOT
    return None


def available() -> bool:
    """Whether this process may make cgroups with a CPU quota and a CPU of their own here (root,
    cgroup v1 or v2, two CPUs at least so that two workers each have one)."""
    v2 = _v2_parent()
    parents = [v2] if v2 is not None else [CGROUP_ROOT / "cpu", CGROUP_ROOT / "cpuset"]
    writable = all(os.access(parent, os.W_OK) for parent in parents)
    return os.geteuid() == 0 and writable and len(os.sched_getaffinity(0)) >= 2


def cpus() -> list[int]:
    """The CPUs this process may run on, for `cpu_group`'s `cpu`."""
    return sorted(os.sched_getaffinity(0))


@contextlib.contextmanager
def cpu_group(pid: int, name: str, cpu: int, share: float | None = None) -> Iterator[None]:
    """Process `pid` (and what it starts from now on) on CPU `cpu` only, with WEIGHT times the
    default CPU weight, capped at `share` of that CPU when given, while the context lasts. The
    groups are removed after (the caller stops the process inside the context; what it started
    and left is killed)."""
    quota = str(int(share * PERIOD_US)) if share is not None else None
    v2 = _v2_parent()
    folders = [v2 / name] if v2 is not None else [CGROUP_ROOT / "cpuset" / name, CGROUP_ROOT / "cpu" / name]
    try:
        for folder in folders:
            folder.mkdir()
        if v2 is not None:
            (folders[0] / "cpuset.cpus").write_text(str(cpu))
            (folders[0] / "cpu.weight").write_text(str(100 * WEIGHT))
            (folders[0] / "cpu.max").write_text(f"{quota or 'max'} {PERIOD_US}")
        else:
            cpuset, group = folders
            (cpuset / "cpuset.cpus").write_text(str(cpu))
            (cpuset / "cpuset.mems").write_text((cpuset.parent / "cpuset.mems").read_text())
            (group / "cpu.shares").write_text(str(1024 * WEIGHT))
            (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(quota or "-1")
        for folder in folders:
            (folder / "cgroup.procs").write_text(str(pid))
        yield
    finally:
        for folder in folders:
            for _ in range(200):  # a killed process may take a moment to be reaped
                with contextlib.suppress(OSError):
                    for left in (folder / "cgroup.procs").read_text().split():
                        os.kill(int(left), signal.SIGKILL)  # a sandbox its stopped worker left
                    folder.rmdir()
                if not folder.exists():
                    break
                time.sleep(0.05)
