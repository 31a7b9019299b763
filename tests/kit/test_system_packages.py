"""The fresh-machine check of `make run`, `autoresearch up` and `make test` (cli/system_packages.py).

Nothing is uninstalled: a package counts as missing when its command is not on PATH, so the real
check runs with a PATH that lacks it. The install branch (root with apt) is tested as a decision;
running it here would need a machine without the packages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cli.system_packages import NEEDED, PACKAGES, missing_packages, plan
from testkit.processes import REPO_ROOT


def test_nothing_to_do_when_installed() -> None:
    assert missing_packages(NEEDED["test"]) == []  # this machine has them all
    assert plan([], is_root=True, has_apt=True).ok
    assert plan([], is_root=False, has_apt=False).ok


def test_root_with_apt_installs_exactly_the_missing_packages() -> None:
    decided = plan(["bubblewrap", "chromium"], is_root=True, has_apt=True)
    assert not decided.ok and decided.advice == ""
    assert decided.commands == (
        ("apt-get", "update", "-qq"),
        ("apt-get", "install", "-y", "-qq", "bubblewrap", "chromium"),
    )


def test_without_root_or_apt_it_only_says_the_one_command() -> None:
    user = plan(["bubblewrap"], is_root=False, has_apt=True)
    assert user.commands == () and user.advice == "sudo apt-get install -y bubblewrap"
    other = plan(["bubblewrap"], is_root=True, has_apt=False)
    assert other.commands == () and "bubblewrap" in other.advice and "apt-get" not in other.advice


def test_a_command_missing_from_path_counts_as_missing(tmp_path: Path) -> None:
    old = os.environ["PATH"]
    try:
        os.environ["PATH"] = str(tmp_path)
        assert missing_packages(["bubblewrap", "git"]) == ["bubblewrap", "git"]
        (tmp_path / "bwrap").symlink_to(shutil.which("bwrap", path=old) or "")
        assert missing_packages(["bubblewrap", "git"]) == ["git"]
    finally:
        os.environ["PATH"] = old
    assert set(PACKAGES) >= set(NEEDED["test"])


def _path_with(tmp_path: Path, *commands: str) -> str:
    """A PATH folder holding only links to these real commands."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for command in commands:
        (folder / command).symlink_to(shutil.which(command) or "")
    return str(folder)


def test_make_test_check_as_a_user_prints_the_apt_command() -> None:
    # A real non-root user (nobody) with apt-get on PATH but no bwrap: told, nothing installed.
    # (Its PATH folder is outside pytest's tmp_path, which only root can enter.)
    with tempfile.TemporaryDirectory() as folder:
        Path(folder).chmod(0o755)
        others = ("apt-get", "git", "make", "chromium", "docker-compose", "pg_ctlcluster")
        as_nobody = [
            shutil.which("setpriv") or "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
        ]
        done = subprocess.run(
            [*as_nobody, "/usr/bin/python3", "-m", "cli.system_packages", "test"],
            cwd=REPO_ROOT,
            env={"PATH": _path_with(Path(folder), *others)},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1, done
    assert done.stderr.strip().endswith("run: sudo apt-get install -y bubblewrap"), done.stderr
    assert "bubblewrap: the sandbox every train.py runs in" in done.stderr


def test_up_without_bubblewrap_stops_before_starting_anything(tmp_path: Path) -> None:
    # Root here, but no apt-get on this PATH: `up` cannot install, so it stops with the fix before
    # preparing data, creating the project or starting a server (the data folder stays absent).
    data_dir = tmp_path / "data"
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "up", "--preset", "test", "--data-dir", str(data_dir)],
        cwd=REPO_ROOT,
        env={"PATH": _path_with(tmp_path, "git")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done
    assert done.stderr.strip().splitlines()[-1] == (
        "autoresearch up: missing system packages (bubblewrap: the sandbox every train.py runs in); "
        "run: install bubblewrap with your system's package manager"
    )
    assert not data_dir.exists() and done.stdout == ""
