"""Fixtures of the runner tests: prepared `test` data and a checked way to run one experiment."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.config import HarnessSettings
from harness.data_layout import PreparedPaths
from harness.runner import RunRequest, run_experiment
from protocol.result import ProgressEvent, RunResult
from tests.fixtures_data import test_data  # noqa: F401  (session fixture, re-exported for these tests)
from tests.proc_scan import processes_left

RunCandidate = Callable[..., RunResult]
STARTUP_ROOM_S = 30.0
# Whether this kernel has autogroups (it shares the CPU between sessions first, when they are
# enabled): then a process started at idle priority in a session of its own yields only if its
# session does too (harness.runner.limits.set_session_nice).
AUTOGROUPS = Path("/proc/self/autogroup").exists()


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
        cancel, sandboxed = overrides.pop("cancel", None), not overrides.pop("unsafe_no_sandbox", False)
        compile_cache = overrides.pop("compile_cache", None)
        # Startup (torch import, the first optimizer step) can take many seconds on a busy 2-core
        # machine; tests that are not about startup give it room so an honest run stays in budget.
        chosen = settings.model_copy(update={"compile_allowance": STARTUP_ROOM_S, **overrides})
        request = RunRequest(
            train_py, chosen, sandboxed=sandboxed, work_root=work_root, compile_cache=compile_cache
        )
        result = run_experiment(request, on_progress=on_progress, cancel=cancel)
        assert processes_left(str(work_root)) == []
        assert list(work_root.iterdir()) == []
        return result

    return run
