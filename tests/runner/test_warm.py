"""keep_warm: the next run's train sandbox is started ahead of time, used by the next run, and
never left behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.config import HarnessSettings
from harness.runner import RunRequest, close_warm_sandbox, run_experiment, warm_up
from harness.runner.limits import idle_nice, session_nice
from harness.runner.run_setup import take_spare
from harness.runner.sandbox import SandboxUnavailableError
from protocol.result import ProgressEvent
from testkit.processes import REPO_ROOT
from tests.proc_scan import processes_left, processes_mentioning
from tests.runner.candidates import FOLDER
from tests.runner.conftest import AUTOGROUPS, STARTUP_ROOM_S


def sessions_nice(pids: list[int]) -> set[int | None]:
    """The niceness of the sessions of `pids` (harness.runner.limits.set_session_nice)."""
    return {session_nice(pid) for pid in pids}


def test_the_next_run_uses_the_spare_sandbox_and_closing_leaves_nothing(
    settings: HarnessSettings, tmp_path: Path
) -> None:
    work_root = tmp_path / "runs"
    work_root.mkdir()
    chosen = settings.model_copy(update={"compile_allowance": STARTUP_ROOM_S, "time_budget": 1.0})
    candidate = FOLDER / "no_training.py"
    try:
        first = run_experiment(RunRequest(candidate, chosen, work_root=work_root, keep_warm=True))
        assert first.status == "ok", first.log_tail
        spare = list(processes_mentioning(str(work_root)))
        assert spare and len(list(work_root.iterdir())) == 1  # the spare's folder
        (spare_dir,) = work_root.iterdir()
        # It waits at idle priority, in sessions that yield too: with autogroups (which share the
        # CPU between sessions first) niceness alone did not make it yield to a running run.
        assert sessions_nice(spare) == ({idle_nice()} if AUTOGROUPS else {None})

        alive_while_training: list[bool] = []
        nice_while_training: list[set[int | None]] = []

        def check(event: ProgressEvent) -> None:
            if not alive_while_training:
                alive_while_training.append(all(Path(f"/proc/{pid}").exists() for pid in spare))
                nice_while_training.append(sessions_nice(spare))

        second = run_experiment(
            RunRequest(candidate, chosen, work_root=work_root, keep_warm=True), on_progress=check
        )
        assert second.status == "ok", second.log_tail
        assert second.val_bpb == first.val_bpb
        assert alive_while_training == [True]  # the spare was the second run's train sandbox
        assert nice_while_training == [{0} if AUTOGROUPS else {None}]  # at normal priority once it ran
        assert processes_left(str(spare_dir)) == []  # it ended with the second run
        assert processes_mentioning(str(work_root))  # and a new spare waits
        assert take_spare("a run with other settings") is None  # a mismatch discards it
        assert processes_left(str(work_root)) == [] and list(work_root.iterdir()) == []
    finally:
        close_warm_sandbox()
    assert processes_left(str(work_root)) == [] and list(work_root.iterdir()) == []


def test_warm_up_starts_the_sandbox_the_first_run_uses(settings: HarnessSettings, tmp_path: Path) -> None:
    """What a worker's preflight does before its first claim: the round trip through a sandbox
    that then serves the first experiment."""
    work_root = tmp_path / "runs"
    work_root.mkdir()
    chosen = settings.model_copy(update={"compile_allowance": STARTUP_ROOM_S, "time_budget": 1.0})
    try:
        warm_up(chosen, work_root=work_root, device="cpu")
        spare = list(processes_mentioning(str(work_root)))
        assert spare and len(list(work_root.iterdir())) == 1

        alive_while_training: list[bool] = []

        def check(event: ProgressEvent) -> None:
            if not alive_while_training:
                alive_while_training.append(all(Path(f"/proc/{pid}").exists() for pid in spare))

        first = run_experiment(
            RunRequest(FOLDER / "no_training.py", chosen, work_root=work_root), on_progress=check
        )
        assert first.status == "ok", first.log_tail
        assert alive_while_training == [True]
        assert processes_left(str(work_root)) == [] and list(work_root.iterdir()) == []
    finally:
        close_warm_sandbox()


def test_closing_without_a_spare_is_harmless() -> None:
    close_warm_sandbox()
    close_warm_sandbox()


def test_waiting_for_a_sandbox_that_dies_before_ready_says_why_and_leaves_nothing(
    settings: HarnessSettings, tmp_path: Path
) -> None:
    """The worker's preflight round trip: here the harness's `import torch` fails inside the
    sandbox (its address space capped far below what torch maps), and the error says so."""
    work_root = tmp_path / "runs"
    work_root.mkdir()
    starved = settings.model_copy(update={"memory_limit_gb": 0.1})
    try:
        with pytest.raises(SandboxUnavailableError, match=r"exited before it was ready: .*Error"):
            warm_up(starved, work_root=work_root, device="cpu")
        assert take_spare("anything") is None  # nothing was kept as a spare
    finally:
        close_warm_sandbox()
    assert processes_left(str(work_root)) == [] and list(work_root.iterdir()) == []


def test_a_sandbox_entry_started_nice_makes_its_own_session_as_nice() -> None:
    """What the train and model entries do first (bwrap gives each sandbox a session of its own):
    a process started at niceness 7 in a new session leaves that session at 7 (without autogroups,
    there is no session niceness to set)."""
    code = (
        "from harness.runner.limits import session_as_nice_as_self, session_nice; "
        "before = session_nice('self'); session_as_nice_as_self(); print(before, session_nice('self'))"
    )
    done = subprocess.run(
        ["nice", "-n", "7", sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        start_new_session=True,
        check=True,
    )
    assert done.stdout.split() == (["0", "7"] if AUTOGROUPS else ["None", "None"]), done.stdout
