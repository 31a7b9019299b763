"""The bubblewrap sandbox that untrusted `train.py` code runs in.

A sandbox gets new user, PID, network, IPC, UTS and cgroup namespaces, no capabilities, a
read-only view of the system (`/usr`), the Python installation and the harness package, an
empty size-limited `/tmp`, and exactly the extra paths its phase binds (the candidate file, its
own work dir, the weights). Nothing else of the host is visible: not the repository, not the
prepared data (training batches come from the harness's feeder), not the server's database or
configuration, and no environment variables beyond the few set here (so no credentials).
`--die-with-parent` and the PID namespace make every process inside die with the sandbox.

No text of any corpus is visible either: every source's text lives in the data folder alone,
which no sandbox binds (harness.runner.run.check_data_hidden refuses a data folder inside a folder
every sandbox sees).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import harness
import protocol

# Files under /etc that programs inside need (dynamic linker cache, user names for getpass,
# time zone, `cc` alternatives for torch.compile). /etc as a whole is not shown.
ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/alternatives",
)
ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
CUDA_DIRS = ("/usr/local/cuda", "/usr/local/nvidia")
TMP_BYTES = 1 << 30  # the sandbox's private /tmp (tmpfs, charged to its memory)


class SandboxUnavailableError(RuntimeError):
    """bubblewrap is missing or cannot create namespaces here; nothing was run."""


@dataclass(frozen=True)
class Bind:
    host: Path
    dest: str
    writable: bool = False


@dataclass(frozen=True)
class Scratch:
    """A private, size-capped tmpfs: writes past `size_bytes` fail with ENOSPC. Mounted before the
    binds, so a bind can sit inside it (the train sandbox's weights file)."""

    dest: str
    size_bytes: int


@dataclass(frozen=True)
class SandboxSpec:
    """What one sandboxed process sees, besides the system and Python (always read-only)."""

    binds: tuple[Bind, ...] = ()
    scratch: tuple[Scratch, ...] = ()
    cwd: str = "/"
    cuda: bool = False
    env: dict[str, str] = field(default_factory=dict)


@functools.cache
def check_bwrap() -> str:
    """Path of a working bwrap; raises SandboxUnavailableError with the fix when there is none."""
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailableError(
            "bubblewrap (bwrap) is not installed, so train.py cannot be sandboxed; install it "
            "(apt-get install bubblewrap) or, only for code you trust, pass --unsafe-no-sandbox"
        )
    probe = [path, "--unshare-all", "--unshare-user", "--die-with-parent", *system_args(), "true"]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise SandboxUnavailableError(
            f"bubblewrap cannot create a sandbox here ({done.stderr.strip() or done.returncode}); "
            "it needs user namespaces (sysctl kernel.unprivileged_userns_clone=1, or run as root; in "
            "a container allow unshare, e.g. --security-opt seccomp=unconfined)"
        )
    return path


def python_roots() -> list[Path]:
    """The Python installation, the virtualenv, the harness package and the vocabulary it writes
    its results in (protocol/, public source like the harness): shown read-only.

    Both the given and the resolved name of each are bound, so symlinked venvs keep working.
    """
    roots = {
        Path(sys.base_prefix),
        Path(sys.prefix),
        Path(harness.__file__).parent,
        Path(protocol.__file__).parent,
    }
    return sorted(roots | {root.resolve() for root in roots})


def whole_roots() -> list[Path]:
    """The host folders system_args() and the Python binds show whole: /usr, root folders that
    are not links to it, the Python installation, the virtualenv, harness/ and protocol/."""
    roots = [Path("/usr"), *(Path("/") / name for name in ROOT_LINKS)]
    return [root for root in roots if root.is_dir() and not root.is_symlink()] + python_roots()


def system_roots() -> list[Path]:
    """The host folders every sandbox sees whole: whole_roots() and the GPU driver folders (by
    their real paths)."""
    return whole_roots() + [Path(folder).resolve() for folder in CUDA_DIRS if os.path.isdir(folder)]


def system_args() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ROOT_LINKS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for etc in ETC_FILES:
        if os.path.exists(etc):
            args += ["--ro-bind", etc, etc]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm"]
    return args


def visible_args(paths: Sequence[str], roots: Sequence[Path]) -> list[str]:
    """bwrap arguments that show each of `paths` read-only at its own path, where `roots` (real
    paths) are already bound whole. No bind may land on a path inside a root, which is read-only
    there: bwrap fails to start when it tries (on most CUDA images /usr/local/cuda is a link to
    /usr/local/cuda-13.0 inside the bound /usr). So each path is taken by its real path:

    - a path missing, or a link to nothing: skipped;
    - its real path inside a root: already visible; a link outside every root is recreated;
    - its real path outside every root: that real path is bound, and a link is recreated unless
      the link itself lies in a root (then it is visible and now resolves).
    """

    def inside(path: Path) -> bool:
        return any(path == root or root in path.parents for root in roots)

    args: list[str] = []
    for given in map(Path, paths):
        real = given.resolve()
        if not real.exists():
            continue
        if not inside(real):
            args += ["--ro-bind", str(real), str(real)]
        if real != given and not inside(given.parent.resolve()):
            args += ["--symlink", str(real), str(given)]
    return args


def cuda_args() -> list[str]:
    """GPU device nodes and driver files, for sandboxes on a CUDA device."""
    args: list[str] = []
    for node in sorted(Path("/dev").glob("nvidia*")):
        args += ["--dev-bind", str(node), str(node)]
    args += visible_args(CUDA_DIRS, [root.resolve() for root in whole_roots()])
    # NVML and the CUDA driver read PCI topology from /sys.
    return [*args, "--ro-bind", "/sys", "/sys"]


def bwrap_argv(spec: SandboxSpec, command: Sequence[str]) -> list[str]:
    argv = [
        check_bwrap(),
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "sandbox",
        *system_args(),
        "--size",
        str(TMP_BYTES),
        "--tmpfs",
        "/tmp",
    ]
    for root in python_roots():
        argv += ["--ro-bind", str(root), str(root)]
    if spec.cuda:
        argv += cuda_args()
    for scratch in spec.scratch:
        argv += ["--size", str(scratch.size_bytes), "--tmpfs", scratch.dest]
    for bind in spec.binds:
        argv += ["--bind" if bind.writable else "--ro-bind", str(bind.host), bind.dest]
    argv += ["--chdir", spec.cwd, "--clearenv"]
    for key, value in sandbox_env(spec).items():
        argv += ["--setenv", key, value]
    return [*argv, "--", *command]


def sandbox_env(spec: SandboxSpec) -> dict[str, str]:
    """The whole environment of a sandboxed process: nothing is inherited but the GPU choice."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "TRITON_CACHE_DIR": "/tmp/triton",
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/inductor",
    }
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    return {**env, **spec.env}


def python_command(module: str, *args: str) -> list[str]:
    """Run a harness module with the harness's interpreter: isolated, unbuffered, no bytecode."""
    return [sys.executable, "-I", "-B", "-u", "-m", module, *args]


def visible_path(spec: SandboxSpec, host: Path, sandboxed: bool) -> str:
    """Where the sandboxed process finds `host`: its bind destination, or `host` unsandboxed."""
    if not sandboxed:
        return str(host)
    for bind in spec.binds:
        if bind.host == host:
            return bind.dest
    raise ValueError(f"{host} is not bound into the sandbox")
