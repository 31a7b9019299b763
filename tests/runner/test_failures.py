"""Each failure class of a candidate gets its status, error class and a message that helps."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from harness.config import HarnessSettings
from harness.runner import timing
from harness.runner.limits import idle_nice, session_nice
from tests.proc_scan import children_mentioning
from tests.runner.candidates import compose
from tests.runner.conftest import AUTOGROUPS

pytestmark = pytest.mark.heavy

# (candidate part, status, error class, texts the message must contain). A failure in train()
# also names the candidate's line: the traceback's tail is the candidate's, not the harness's.
CASES = [
    ("broken/build_model_raises.py", "crash", "build_model_error", ("n_layer must be positive",)),
    (
        "broken/train_raises.py",
        "crash",
        "train_error",
        ("shape mismatch in the attention block", 'train.py", line', "in train"),
    ),
    ("broken/segfault.py", "crash", "killed", ("SIGSEGV",)),
    # the first batch, of one row on a CPU (score_plan.HEAD_ROWS), is where it shows
    ("broken/wrong_shape.py", "invalid", "invalid_output", ("expected (1, 64, 512)",)),
    ("broken/nan_logits.py", "invalid", "invalid_output", ("NaN",)),
]


@pytest.mark.parametrize(("part", "status", "error_class", "texts"), CASES)
def test_failure_is_classified(
    run_candidate, tmp_path: Path, part: str, status: str, error_class: str, texts: tuple[str, ...]
) -> None:
    result = run_candidate(compose(tmp_path, part), time_budget=1.0)
    assert (result.status, result.error_class) == (status, error_class), result.log_tail
    assert all(text in result.error_message for text in texts), result.error_message
    assert result.val_bpb is None


def test_syntax_error_is_reported_with_its_line(run_candidate, tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\n\ndef train(model, ctx)\n    pass\n")
    result = run_candidate(broken, time_budget=1.0)
    assert (result.status, result.error_class) == ("crash", "syntax_error"), result.log_tail
    assert "SyntaxError" in result.error_message and "line 3" in result.error_message


def test_a_missing_module_is_an_import_error_that_names_it(run_candidate, tmp_path: Path) -> None:
    """Not a syntax error: the cause an agent can act on is the module its environment lacks."""
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nimport flash_attn_not_here\n\ndef build_model(ctx): ...\n")
    result = run_candidate(broken, time_budget=1.0)
    assert (result.status, result.error_class) == ("crash", "import_error"), result.log_tail
    assert result.error_message.startswith("importing train.py failed:\nTraceback")
    assert result.error_message.endswith("ModuleNotFoundError: No module named 'flash_attn_not_here'")


def test_unbounded_allocation_fails_cleanly_at_the_memory_limit(run_candidate, tmp_path: Path) -> None:
    result = run_candidate(
        compose(tmp_path, "hostile/allocates_unbounded.py"), time_budget=1.0, memory_limit_gb=1.5
    )
    assert (result.status, result.error_class) == ("crash", "out_of_memory"), result.log_tail
    assert "limit 1.5 GB" in result.error_message and "can't allocate memory" in result.error_message


def test_nan_loss_fails_fast(settings: HarnessSettings, run_candidate, tmp_path: Path) -> None:
    """The candidate swallows the harness's exception and sleeps; the harness stops it anyway."""
    result = run_candidate(compose(tmp_path, "broken/nan_loss.py"), compile_allowance=5.0)
    assert (result.status, result.error_class) == ("crash", "nan_loss"), result.log_tail
    assert "nan" in result.error_message.lower()
    deadline = timing.train_deadline(settings.time_budget, 5.0, settings.overrun_floor_s)
    assert result.startup_seconds + result.training_seconds < deadline - 1.0


def test_sleeping_past_the_deadline_is_a_timeout(
    settings: HarnessSettings, run_candidate, tmp_path: Path
) -> None:
    chosen = {"time_budget": 1.0, "compile_allowance": 2.0}
    result = run_candidate(compose(tmp_path, "hostile/sleeps_forever.py"), **chosen)
    assert (result.status, result.error_class) == ("timeout", "timeout"), result.log_tail
    assert "ctx.time_left()" in result.error_message
    # Killed at the deadline counted from the end of its startup (its first ctx.log), not from
    # the end of the whole allowance: the deadline it was killed at, and not before it. (How late
    # after it the kill lands is the machine's scheduling: a second on a slow host.)
    floor = settings.overrun_floor_s
    deadline = timing.train_deadline(1.0, result.startup_seconds, floor)
    assert timing.train_deadline(1.0, chosen["compile_allowance"], floor) - deadline > 0.5  # the two differ
    killed_at = re.search(r"killed at the hard deadline, ([\d.]+) s after start", result.error_message)
    assert killed_at is not None, result.error_message
    assert float(killed_at.group(1)) == pytest.approx(deadline, abs=0.06)  # printed to 0.1 s
    # Each of the two is rounded to the millisecond, so their sum may fall 1 ms short.
    assert result.startup_seconds + result.training_seconds >= deadline - 0.001


def test_training_past_the_budget_is_over_budget_and_still_scored(
    settings: HarnessSettings, run_candidate, tmp_path: Path
) -> None:
    budget = 1.0
    tolerance = timing.over_budget_tolerance(budget, settings.overrun_floor_s)
    result = run_candidate(
        compose(tmp_path, "hostile/over_budget.py", overrun_s=tolerance + 1.5), time_budget=budget
    )
    assert (result.status, result.error_class) == ("over_budget", "over_budget"), result.log_tail
    assert result.training_seconds > budget + tolerance
    assert result.val_bpb is not None  # measured, for the record; over_budget is never kept


def test_startup_is_not_training_time_up_to_the_allowance(
    settings: HarnessSettings, run_candidate, tmp_path: Path
) -> None:
    """A slow import (e.g. compilation) is credited as startup; training still gets its budget."""
    result = run_candidate(compose(tmp_path, "broken/slow_startup.py", startup_s=2.0), compile_allowance=6.0)
    assert result.status == "ok", result.log_tail
    assert result.startup_seconds >= 2.0
    assert result.training_seconds <= settings.time_budget + timing.over_budget_tolerance(
        settings.time_budget, settings.overrun_floor_s
    )


def test_startup_beyond_the_allowance_counts_as_training(
    settings: HarnessSettings, run_candidate, tmp_path: Path
) -> None:
    """Only `compile_allowance` seconds of startup are free: a first step that comes only once
    ctx.time_left() is below minus the tolerance makes the run over budget."""
    overrun = timing.over_budget_tolerance(3.0, settings.overrun_floor_s) + 0.5
    candidate = compose(tmp_path, "broken/late_first_step.py", over_s=overrun)
    result = run_candidate(candidate, compile_allowance=1.0, time_budget=3.0)
    assert result.startup_seconds == pytest.approx(1.0, abs=0.01)
    assert result.training_seconds >= 3.0 + overrun
    assert (result.status, result.error_class) == ("over_budget", "over_budget"), result.log_tail


def test_memory_limit_holds_for_many_processes_together(
    settings: HarnessSettings, run_candidate, tmp_path: Path
) -> None:
    """Five children of 600 MB each stay under the per-process limit of 2 GB, but not under the
    sandbox's total: the kernel kills one, and the run fails fast instead of at the deadline."""
    candidate = compose(tmp_path, "hostile/allocates_in_children.py", children=5, child_bytes=600 << 20)
    # A long budget: on a busy machine (make test runs two test processes) the children may take
    # seconds to fill 3 GB; the run must still end when the kernel kills one, not at the deadline.
    result = run_candidate(candidate, time_budget=30.0, memory_limit_gb=2.0, compile_allowance=20.0)
    assert (result.status, result.error_class) == ("crash", "out_of_memory"), result.log_tail
    assert "limit 2 GB" in result.error_message
    # Stopped when the kernel killed a child, not at the deadline.
    assert (
        result.startup_seconds + result.training_seconds
        < timing.train_deadline(30.0, 20.0, settings.overrun_floor_s) - 0.5
    )


@pytest.mark.parametrize(("part", "scorer_started"), [("broken/build_model_raises.py", False), (None, True)])
def test_the_scorer_starts_only_once_the_candidate_trains(
    run_candidate, tmp_path: Path, part: str | None, scorer_started: bool
) -> None:
    """The scorer and its two model sandboxes (three interpreters importing torch) start at the
    candidate's first training batch: one that fails in build_model never costs them, one that
    trains does. Seen in /proc, among this process's children, while the run goes (the scorer's
    command line names the run). The scorer waits for `go` at idle priority, its session too (with
    autogroups, which share the CPU between sessions first, niceness alone did not make it yield
    to the training run), and scores at normal priority."""
    candidate = compose(tmp_path, *([part] if part else []))
    seen: list[str] = []
    sessions_nice: set[int | None] = set()
    done = threading.Event()

    def look() -> None:
        while not done.is_set():
            for pid, command in children_mentioning("harness.runner.scoring.scorer").items():
                if str(tmp_path) in command:
                    seen.append(command)
                    sessions_nice.add(session_nice(pid))
            time.sleep(0.02)

    watcher = threading.Thread(target=look)
    watcher.start()
    try:
        result = run_candidate(candidate, time_budget=1.0)
    finally:
        done.set()
        watcher.join()
    assert (result.status == "ok") == scorer_started, result.log_tail
    assert bool(seen) == scorer_started
    if scorer_started:
        assert sessions_nice >= ({idle_nice(), 0} if AUTOGROUPS else {None}), sessions_nice
