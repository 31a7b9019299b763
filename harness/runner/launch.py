"""Start one process in the sandbox (or, when explicitly unsafe, without it) and end it for sure."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

from harness.runner.limits import Cgroup, Limits, descendants, set_session_nice, tree_cpu_seconds
from harness.runner.sandbox import SandboxSpec, bwrap_argv, sandbox_env


@dataclass
class Launched:
    """A started process tree: the sandbox (or bare process) and its cgroup, if one was made."""

    popen: subprocess.Popen[bytes]
    cgroup: Cgroup | None

    def pids(self) -> list[int]:
        if self.cgroup is not None:
            return self.cgroup.pids()
        return descendants(self.popen.pid) if self.popen.poll() is None else []

    def cpu_seconds(self) -> float:
        """CPU seconds the whole tree used so far, every process it ever ran included: the kernel's
        account of its cgroup, which a candidate can neither leave nor escape by having its
        children reaped. Without an accounting cgroup, those of its live processes and the children
        they waited for (a score sandbox cannot make children: harness.runner.sandboxed.threads_only)."""
        if self.cgroup is not None and (seconds := self.cgroup.cpu_seconds()) is not None:
            return seconds
        return tree_cpu_seconds(self.pids())

    def oom_killed(self) -> bool:
        return self.cgroup is not None and self.cgroup.oom_killed()

    def kill(self) -> None:
        """SIGKILL the whole tree. The sandbox's PID namespace dies with its first process."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.popen.kill()
        if self.cgroup is not None:
            self.cgroup.kill_all()
        else:
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)

    def close(self) -> None:
        """Kill what is left and remove the cgroup."""
        self.kill()
        if self.cgroup is not None:
            self.cgroup.remove()


def launch(
    command: Sequence[str],
    spec: SandboxSpec,
    *,
    sandboxed: bool,
    limits: Limits,
    pass_fds: Sequence[int] = (),
    stdin: int | IO[Any] | None = subprocess.DEVNULL,
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
    nice: int = 0,
) -> Launched:
    """Start `command` inside a sandbox described by `spec`, under `limits`.

    `nice` > 0 starts it at lower CPU priority. Unsandboxed (only with --unsafe-no-sandbox) the
    command runs as a plain child in a new session with the same cleared environment and working
    directory; its binds are then the host paths.
    """
    cgroup = Cgroup.create(limits)
    if sandboxed:
        argv, env, cwd = bwrap_argv(spec, command), {"PATH": os.environ.get("PATH", "/usr/bin")}, None
    else:
        argv, env, cwd = list(command), sandbox_env(spec), spec.cwd
    if nice:
        argv = ["nice", "-n", str(nice), *argv]
    if cgroup is not None:
        argv = cgroup.wrap(argv)
    try:
        popen = subprocess.Popen(
            argv,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=env,
            cwd=cwd,
            pass_fds=tuple(pass_fds),
            start_new_session=True,
        )
    except BaseException:
        if cgroup is not None:
            cgroup.remove()
        raise
    if nice:
        set_session_nice(popen.pid, nice)  # bwrap's own session; the entry inside sets the sandbox's
    return Launched(popen=popen, cgroup=cgroup)
