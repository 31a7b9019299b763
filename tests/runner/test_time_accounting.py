"""Every second a candidate trains is counted: hostile candidates that train before their first
ctx.log (silently, logging late, from a buffer filled while building the model) or that look for
the token files to train on before their clock starts.

Each prints, by its own clock, how long it trained from its first request for data; the
harness's `training_seconds` must cover all of it. The tests give a startup allowance far larger
than the budget: under the old rule (startup ended at the first ctx.log) each attack would have
trained that much longer for free."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.config import HarnessSettings
from harness.data_layout import PreparedPaths
from harness.runner import timing
from tests.runner.candidates import compose

pytestmark = pytest.mark.heavy

BUDGET_S = 3.0
ALLOWANCE_S = 30.0
# The feeder notes the first request when its thread reads it: a little after the candidate
# sent it, more on a busy machine.
CLOCK_SLACK_S = 0.5


def trained_for(log: str) -> float:
    match = re.search(r"TRAINED FOR ([0-9.]+) s", log)
    assert match, log
    return float(match.group(1))


def test_training_without_ever_logging_counts_in_full(run_candidate, tmp_path: Path) -> None:
    candidate = compose(tmp_path, "hostile/trains_silently.py", train_s=2 * BUDGET_S)
    result = run_candidate(candidate, time_budget=BUDGET_S, compile_allowance=ALLOWANCE_S)
    silent = trained_for(result.log_tail)
    assert silent >= 2 * BUDGET_S
    assert result.training_seconds >= silent - CLOCK_SLACK_S
    assert (result.status, result.error_class) == ("over_budget", "over_budget"), result.log_tail
    assert result.steps is None or result.steps == 0  # it never called ctx.log


@pytest.mark.parametrize("part", ["hostile/logs_late.py", "hostile/copies_data_early.py"])
def test_training_before_the_first_log_does_not_stretch_the_budget(
    settings: HarnessSettings, run_candidate, tmp_path: Path, part: str
) -> None:
    """Logging late, or training on batches copied while building the model: the clock ran from
    the first batch asked for."""
    candidate = compose(tmp_path, part, silent_s=BUDGET_S / 2)
    result = run_candidate(candidate, time_budget=BUDGET_S, compile_allowance=ALLOWANCE_S)
    assert result.status == "ok", result.log_tail
    # ctx.time_left() counted from its first request, so it stopped at the budget...
    assert trained_for(result.log_tail) <= BUDGET_S + timing.over_budget_tolerance(
        BUDGET_S, settings.overrun_floor_s
    )
    # ...and the harness counted all of it, the silent part included.
    assert result.training_seconds >= trained_for(result.log_tail) - CLOCK_SLACK_S
    assert result.startup_seconds < ALLOWANCE_S / 2


def test_token_files_are_not_visible_in_the_train_sandbox(
    test_data: tuple[HarnessSettings, PreparedPaths], run_candidate, tmp_path: Path
) -> None:
    _, paths = test_data
    hidden = [str(paths.train_dir / name) for name in ("tokens.bin", "docs.npy", "meta.json")]
    candidate = compose(tmp_path, "hostile/reads_token_files.py", paths=hidden)
    result = run_candidate(candidate, time_budget=1.0)
    assert result.status == "ok", result.log_tail
    assert "NO TOKEN FILES []" in result.log_tail and "FOUND" not in result.log_tail
    for path in [*hidden, "/sandbox/data/train/tokens.bin"]:
        assert f"HIDDEN {path}" in result.log_tail


@pytest.mark.parametrize("silent_s", [0.0, 1.0])
def test_time_left_inside_agrees_with_the_harness(
    settings: HarnessSettings, run_candidate, tmp_path: Path, silent_s: float
) -> None:
    """An honest candidate that stops when ctx.time_left() <= 0 is never over budget, however
    late it logs: time_left counts from the first request for data as the harness does."""
    candidate = compose(tmp_path, "hostile/logs_late.py", silent_s=silent_s)
    result = run_candidate(candidate, time_budget=BUDGET_S, compile_allowance=ALLOWANCE_S)
    assert result.status == "ok", result.log_tail
    tolerance = timing.over_budget_tolerance(BUDGET_S, settings.overrun_floor_s)
    assert BUDGET_S <= result.training_seconds <= BUDGET_S + tolerance
