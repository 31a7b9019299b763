"""The wheel ships what `autoresearch init` needs: the baseline train.py and program.md."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from testkit.processes import REPO_ROOT

PACKAGES = ("harness", "server", "worker", "client", "protocol", "cli", "agent")


def test_wheel_includes_the_baseline_train_py_and_program_md(tmp_path: Path) -> None:
    # Built from a copy: setuptools writes build/ and *.egg-info next to the sources.
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy2(REPO_ROOT / "pyproject.toml", source)
    for package in PACKAGES:
        shutil.copytree(REPO_ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    built = subprocess.run(
        [*pip_wheel, "-w", str(tmp_path), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("harness/baseline/__init__.py", "harness/baseline/train.py", "harness/baseline/program.md"):
        assert name in names
        assert zipfile.ZipFile(wheel).read(name) == (REPO_ROOT / name).read_bytes()
