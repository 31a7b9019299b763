"""Fixtures of the runner tests: prepared `test` data and a checked way to run one experiment."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.config import HarnessSettings
from harness.prepared import PreparedPaths
from harness.result import ProgressEvent, RunResult
from harness.runner import run_experiment
from tests.fixtures_data import test_data  # noqa: F401  (session fixture, re-exported for these tests)

RunCandidate = Callable[..., RunResult]
STARTUP_ROOM_S = 30.0


def pids_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains `text`."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if text.encode() in cmdline:
                found.append(int(entry.name))
    return found


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that contain `text`."""
    lines = []
    for pid in pids_mentioning(text):
        try:
            lines.append(
                Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            )
        except OSError:
            continue
    return lines


def processes_left(text: str, timeout: float = 10.0) -> list[str]:
    """Command lines of processes mentioning `text` that are still there after `timeout`.

    A SIGKILLed sandbox does not leave /proc at once: the kernel ends the processes of its PID
    namespace after its first process, asynchronously. What is left after a few seconds is a leak.
    """
    deadline = time.monotonic() + timeout
    while (left := processes_mentioning(text)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.fixture
def settings(test_data: tuple[HarnessSettings, PreparedPaths]) -> HarnessSettings:  # noqa: F811
    return test_data[0]


@pytest.fixture
def run_candidate(settings: HarnessSettings, tmp_path: Path) -> RunCandidate:
    """Run a candidate under the `test` preset (with `overrides`), then check nothing is left:
    no process that mentions the run's folder, and no file in it."""
    work_root = tmp_path / "runs"
    work_root.mkdir()

    def run(
        train_py: Path, on_progress: Callable[[ProgressEvent], None] | None = None, **overrides: Any
    ) -> RunResult:
        options = {key: overrides.pop(key) for key in ("unsafe_no_sandbox", "cancel") if key in overrides}
        # Startup (torch import, the first optimizer step) can take many seconds on a busy 2-core
        # machine; tests that are not about startup give it room so an honest run stays in budget.
        chosen = settings.model_copy(update={"compile_allowance": STARTUP_ROOM_S, **overrides})
        result = run_experiment(
            train_py,
            chosen,
            on_progress=on_progress,
            work_root=work_root,
            **options,
        )
        assert processes_left(str(work_root)) == []
        assert list(work_root.iterdir()) == []
        return result

    return run
