"""The Debian packages a fresh machine needs: installed with apt as root, else the one command to run.

`make run` (through `autoresearch up`) needs bubblewrap; `make test` needs what the tests use.
This file uses the standard library only, so that `make test` can run it with the system's
python3 before the virtualenv exists: `python3 -m cli.system_packages test`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

# Each package, the command that shows it is installed, and why it is needed.
PACKAGES: dict[str, tuple[str, str]] = {
    "bubblewrap": ("bwrap", "the sandbox every train.py runs in"),
    "chromium": ("chromium", "the browser tests of the pages"),
    "postgresql": ("pg_ctlcluster", "the PostgreSQL tests (a throwaway cluster as user postgres)"),
    "docker-compose": ("docker-compose", "validating docker-compose.yml (`docker-compose config`)"),
    "git": ("git", "the research repo"),
    "make": ("make", "the Makefile"),
    "slurm-wlm": ("slurmctld", "the Slurm script's test on a one-node cluster it starts (tests/deploy)"),
    "munge": ("munged", "Slurm's authentication, for the same test"),
}
NEEDED = {
    "run": ["bubblewrap"],
    "test": ["bubblewrap", "chromium", "postgresql", "docker-compose", "git", "make", "slurm-wlm", "munge"],
}


@dataclass(frozen=True)
class Plan:
    """What to do about the missing packages: nothing, install them (`commands`), or stop and tell."""

    missing: tuple[str, ...]
    commands: tuple[tuple[str, ...], ...] = ()  # run as they are (root with apt)
    advice: str = ""  # the one command for the user, when we may not install

    @property
    def ok(self) -> bool:
        return not self.missing


def missing_packages(names: list[str]) -> list[str]:
    """The packages whose command is not on PATH, or in the system folders where daemons live
    (slurmctld, munged: a user's PATH often lacks /usr/sbin)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return [name for name in names if shutil.which(PACKAGES[name][0], path=path) is None]


def plan(missing: list[str], is_root: bool, has_apt: bool) -> Plan:
    """The decision alone: install as root with apt, otherwise the one command the user runs."""
    if not missing:
        return Plan(missing=())
    names = tuple(missing)
    if has_apt and is_root:
        return Plan(
            names, commands=(("apt-get", "update", "-qq"), ("apt-get", "install", "-y", "-qq", *names))
        )
    if has_apt:
        return Plan(names, advice=f"sudo apt-get install -y {' '.join(names)}")
    return Plan(names, advice=f"install {', '.join(names)} with your system's package manager")


def ensure(purpose: str, who: str) -> None:
    """Make sure the packages `purpose` needs are installed; SystemExit(1) with the fix if not."""
    missing = missing_packages(NEEDED[purpose])
    decided = plan(missing, os.geteuid() == 0, shutil.which("apt-get") is not None)
    if decided.ok:
        return
    reasons = "; ".join(f"{name}: {PACKAGES[name][1]}" for name in decided.missing)
    if decided.advice:
        raise SystemExit(f"{who}: missing system packages ({reasons}); run: {decided.advice}")
    print(
        f"[{who}] installing {' '.join(decided.missing)} with apt-get (running as root): {reasons}",
        flush=True,
    )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in decided.commands:
        if subprocess.run(command, env=env).returncode != 0:
            raise SystemExit(f"{who}: `{' '.join(command)}` failed (its output is above)")
    still = missing_packages(list(decided.missing))
    if still:
        raise SystemExit(
            f"{who}: installed {' '.join(still)}, but {PACKAGES[still[0]][0]} is still not on PATH"
        )


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in NEEDED:
        raise SystemExit(f"usage: python3 -m cli.system_packages {{{'|'.join(NEEDED)}}}")
    ensure(sys.argv[1], f"make {sys.argv[1]}")
