"""Resource limits for sandboxed processes: a cgroup where one can be made, rlimits always.

Two mechanisms, because neither works everywhere:

* a cgroup (v1 `pids` + `memory` hierarchies, as on this project's CI machines) per sandbox:
  caps the number of tasks (fork bombs) and the memory of the whole process tree, counts OOM
  kills, and lists the sandbox's processes for cleanup and peak-RSS sampling; and, in the v1
  `cpuacct` hierarchy or else the v2 one, the kernel's account of the CPU time of every process
  the sandbox ever ran (a reaped child's included, which no reading of /proc sees);
* rlimits set by the trusted entry code inside the sandbox before `train.py` is imported:
  RLIMIT_AS (memory, CPU device only: CUDA reserves huge virtual ranges), RLIMIT_NPROC
  (processes; the kernel does not enforce it for uid 0, so as root only the cgroup counts),
  RLIMIT_FSIZE (one file's size) and RLIMIT_CORE=0.

Which mechanisms applied is written into the run's log, so a missing limit is never silent.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
FILE_SIZE_LIMIT = 16 << 30  # the largest single file a sandbox may write (weights included)
TREE_MEMORY_FACTOR = 1.25
TREE_MEMORY_EXTRA = 256 << 20
# The core a score sandbox leaves to the scorer, whose loss runs while the model computes the next
# batch (the model process runs torch with every other core's thread).
CPU_SPARE_CORES = 1


@dataclass(frozen=True)
class Limits:
    memory_bytes: int  # 0 = no memory limit
    max_tasks: int  # processes plus threads
    cgroup_prefix: str = "autoresearch"  # names this run's cgroups, for cleanup after a crash


def default_limits(memory_limit_gb: float, run_id: str) -> Limits:
    # torch starts a thread per core and torch.compile a worker process per core.
    cores = os.cpu_count() or 1
    return Limits(
        memory_bytes=int(memory_limit_gb * (1 << 30)),
        max_tasks=1024 + 64 * cores,
        cgroup_prefix=f"autoresearch-{run_id}",
    )


def tree_memory_bytes(limits: Limits) -> int:
    """The cgroup's cap on a whole sandbox. It sits above the per-process RLIMIT_AS, which fails
    an allocation cleanly; the cgroup is the backstop against many processes (it OOM-kills)."""
    return int(limits.memory_bytes * TREE_MEMORY_FACTOR) + TREE_MEMORY_EXTRA


def apply_rlimits(limits: Limits, device_type: str) -> None:
    """Set soft and hard limits for this process and its children (called inside the sandbox)."""

    def cap(which: int, value: int) -> None:
        resource.setrlimit(which, (value, value))

    cap(resource.RLIMIT_CORE, 0)
    cap(resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT)
    cap(resource.RLIMIT_NPROC, limits.max_tasks)
    if limits.memory_bytes and device_type == "cpu":
        cap(resource.RLIMIT_AS, limits.memory_bytes)


def own_cgroup(controller: str) -> Path | None:
    """This process's cgroup folder in the v1 hierarchy of `controller`, if mounted."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):
                folder = CGROUP_ROOT / controller / path.lstrip("/")
                return folder if folder.is_dir() else None
    return None


def own_unified_cgroup() -> Path | None:
    """This process's cgroup folder in the v2 (unified) hierarchy, if one is mounted: the only one
    on a v2 host, beside the v1 ones on a hybrid host. Its `cpu.stat` is there without any
    controller enabled, so a child of it accounts for CPU wherever it may be made."""
    with contextlib.suppress(OSError):
        mount = next(
            (
                Path(line.split()[4])
                for line in Path("/proc/self/mountinfo").read_text().splitlines()
                if line.split(" - ", 1)[-1].startswith("cgroup2 ")
            ),
            None,
        )
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if mount is not None and line.startswith("0::"):
                folder = mount / line[3:].lstrip("/")
                return folder if folder.is_dir() else None
    return None


def cgroup_parents() -> dict[str, Path]:
    """Where this process's sandboxes' cgroups go, by role: the v1 `pids` and `memory` hierarchies
    (limits), and CPU accounting: v1 `cpuacct`, else the v2 hierarchy (`unified`)."""
    parents = {name: own_cgroup(name) for name in ("pids", "memory", "cpuacct")}
    if parents["cpuacct"] is None:
        parents["unified"] = own_unified_cgroup()
    return {name: folder for name, folder in parents.items() if folder is not None}


class Cgroup:
    """One sandbox's cgroups, created empty and removed after the run: v1 `pids` and `memory` for
    its limits, where both can be made, and one that accounts for its CPU (v1 `cpuacct` or v2)."""

    def __init__(self, folders: dict[str, Path]) -> None:
        self.folders = folders

    @classmethod
    def create(cls, limits: Limits) -> Cgroup | None:
        """New cgroups with `limits`, or None where none can be made here."""
        name = f"{limits.cgroup_prefix}-{uuid.uuid4().hex[:12]}"
        parents = cgroup_parents()
        limiting: dict[str, Path] = {key: parents[key] for key in ("pids", "memory") if key in parents}
        folders = make_folders(name, limiting)
        if len(folders) == 2:
            try:
                (folders["pids"] / "pids.max").write_text(str(limits.max_tasks))
                if limits.memory_bytes:
                    (folders["memory"] / "memory.limit_in_bytes").write_text(str(tree_memory_bytes(limits)))
            except OSError:
                folders = remove_folders(folders)
        else:
            folders = remove_folders(folders)  # limits come in pairs: one alone is not applied
        accounting: dict[str, Path] = {key: parents[key] for key in ("cpuacct", "unified") if key in parents}
        folders |= make_folders(name, accounting)
        return cls(folders) if folders else None

    @property
    def limited(self) -> bool:
        """Whether its pids and memory limits apply."""
        return "pids" in self.folders

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run by a shell that first joins this cgroup, so every descendant is inside."""
        join = 'for f; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 126; shift; done; shift; exec "$@"'
        procs = [str(folder / "cgroup.procs") for folder in self.folders.values()]
        return ["/bin/sh", "-c", join, "sh", *procs, "--", *argv]

    def pids(self) -> list[int]:
        found: set[int] = set()
        for folder in self.folders.values():
            with contextlib.suppress(OSError, ValueError):
                found.update(int(x) for x in (folder / "cgroup.procs").read_text().split())
        return sorted(found)

    def cpu_seconds(self) -> float | None:
        """CPU seconds of every process that ever ran in it, reaped or alive, by the kernel's own
        account; None where it has no accounting cgroup."""
        with contextlib.suppress(OSError, ValueError):
            if "cpuacct" in self.folders:
                return int((self.folders["cpuacct"] / "cpuacct.usage").read_text()) / 1e9
            if "unified" in self.folders:
                for line in (self.folders["unified"] / "cpu.stat").read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "usage_usec":
                        return int(value) / 1e6
        return None

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of this cgroup at its memory limit.

        `oom_kill` in memory.oom_control counts those kills (Linux 4.13 on). `memory.failcnt` is
        only the fallback for older kernels: it also counts charges the kernel met by reclaiming
        page cache, which reading a few GB of files does without any process being in danger.
        """
        folder = self.folders.get("memory")
        if folder is None:
            return False
        with contextlib.suppress(OSError, ValueError):
            for line in (folder / "memory.oom_control").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value) > 0
            return int((folder / "memory.failcnt").read_text()) > 0
        return False

    def kill_all(self) -> None:
        """SIGKILL every process in the cgroup until it is empty (forks race the first rounds)."""
        for _ in range(200):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self) -> None:
        self.kill_all()
        for folder in self.folders.values():
            for _ in range(100):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)  # the last killed tasks are still being reaped


def make_folders(name: str, parents: dict[str, Path]) -> dict[str, Path]:
    """A new folder `name` under each parent that takes one, by the parent's role."""
    made: dict[str, Path] = {}
    for role, parent in parents.items():
        with contextlib.suppress(OSError):
            (parent / name).mkdir()
            made[role] = parent / name
    return made


def remove_folders(folders: dict[str, Path]) -> dict[str, Path]:
    """Remove the (empty) folders; returns none left."""
    for folder in folders.values():
        with contextlib.suppress(OSError):
            folder.rmdir()
    return {}


def stat_fields(pid: int | str) -> list[str]:
    """The fields of /proc/PID/stat after the command name (which may hold spaces and
    parentheses): index 0 is field 3 (state), 1 the ppid, 11 and 12 utime and stime, 19 the start
    time. OSError once the process is gone."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def every_stat() -> Iterator[tuple[int, list[str]]]:
    """(pid, stat_fields) of every live process, from one scan of /proc."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                yield int(entry.name), stat_fields(entry.name)
            except OSError:
                continue  # it ended meanwhile


def descendants(root: int) -> list[int]:
    """`root` and every live process below it, from one scan of /proc."""
    children: dict[int, list[int]] = {}
    for pid, fields in every_stat():
        children.setdefault(int(fields[1]), []).append(pid)
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, reaped_children: bool = False) -> float:
    """User and system CPU seconds process `pid` (all its threads) used so far, from /proc; with
    `reaped_children`, also those of the children it has waited for (which hold their own waited-for
    children's in turn). OSError once it is gone."""
    fields = stat_fields(pid)
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    if reaped_children:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime (fields 16 and 17)
    return ticks / TICKS_PER_S


def tree_cpu_seconds(pids: Sequence[int]) -> float:
    """CPU seconds used so far by a process tree: its live processes `pids` and every process of it
    that has ended and was waited for (inside a sandbox's PID namespace an orphan is waited for by
    the namespace's first process, which is in the tree). Gone processes count 0."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += cpu_seconds(pid, reaped_children=True)
    return total


def peak_rss_bytes(pids: list[int]) -> int:
    """The largest peak resident set size (VmHWM) among `pids`."""
    peak = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
    return peak


def remove_cgroups(prefix: str) -> None:
    """Remove cgroups left by a run (e.g. when its scorer was killed), killing their processes."""
    folders: dict[str, dict[str, Path]] = {}
    for role, parent in cgroup_parents().items():
        for folder in parent.glob(f"{prefix}-*"):
            folders.setdefault(folder.name, {})[role] = folder
    for found in folders.values():
        Cgroup(found).remove()


def idle_nice() -> int:
    """The niceness for processes started ahead of time: idle when we may raise it back later
    (root); otherwise normal, since an unprivileged process could never get its priority back."""
    return 19 if os.geteuid() == 0 else 0


def set_session_nice(pid: int | str, nice: int, tries: int = 1) -> None:
    """Give the session of process `pid` ("self": this one) the niceness `nice`.

    With autogroup scheduling (/proc/sys/kernel/sched_autogroup_enabled, on in the kernel of this
    project's CI machines) the CPU is shared between sessions first and by niceness only within a
    session, so a process in a session of its own (every sandbox, every scorer) started at
    idle_nice() took as much CPU as the run it was to yield to. A session's own niceness (its
    autogroup's, /proc/PID/autogroup) makes it yield. The kernel takes this write from a process
    without CAP_SYS_ADMIN (one in a sandbox) once a tenth of a second for the whole machine and
    answers EAGAIN otherwise, so `tries` are that far apart. A kernel built without autogroups has
    no such file, and there niceness alone works. Where the write is refused the session keeps its
    niceness: this decides how much CPU a start ahead of time takes from a training run, nothing
    that a run may do.
    """
    for _ in range(tries):
        try:
            Path(f"/proc/{pid}/autogroup").write_text(str(nice))
            return
        except BlockingIOError:
            time.sleep(0.11)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            return  # no autogroups here, the process has ended, or a security module says no


def session_as_nice_as_self() -> None:
    """Called first by a sandbox's entry, whose session bwrap made: the session gets the niceness
    the process was started with (see set_session_nice)."""
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    if nice > 0:
        set_session_nice("self", nice, tries=10)


def session_nice(pid: int | str) -> int | None:
    """The niceness of the session of `pid`; None on a kernel without autogroups, or once it has
    ended."""
    try:
        return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])
    except (FileNotFoundError, ProcessLookupError):
        return None


def raise_priority(pids: list[int]) -> None:
    """Back to normal CPU priority after an idle-priority start (needs root; else stays idle).

    Niceness is per thread on Linux, so every thread of every process is set; and per session
    (set_session_nice), so each process's session too.
    """
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in os.scandir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError, ValueError):
                    os.setpriority(os.PRIO_PROCESS, int(task.name), 0)
        with contextlib.suppress(OSError):
            if session_nice(pid):
                set_session_nice(pid, 0)
