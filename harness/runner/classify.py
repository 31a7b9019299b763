"""Turning what the harness observed of the train phase into a status and a precise message."""

from __future__ import annotations

import signal

from harness.config import HarnessSettings
from harness.runner import timing
from harness.runner.limits import FILE_SIZE_LIMIT
from harness.runner.train_phase import TrainOutcome

Ending = tuple[str, str, str]  # how a run ended: status, error class, message

# Where the train entry reported an exception: the error class it earns.
ERROR_CLASS_BY_WHERE = {
    "import": "syntax_error",
    "build_model": "build_model_error",
    "train": "train_error",
    "save": "train_error",
    "harness": "sandbox_error",
}
# Exceptions (by the name the entry reports them under) that make an import failure `import_error`.
IMPORT_ERRORS = ("ImportError", "ModuleNotFoundError")
WHERE_TEXT = {
    "import": "importing train.py failed",
    "build_model": "build_model(ctx) raised",
    "train": "train(model, ctx) raised",
    "save": "saving the trained weights failed",
    "harness": "the harness could not start inside the sandbox",
}


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def memory_limit(settings: HarnessSettings) -> str:
    return f" (limit {settings.memory_limit_gb:g} GB)" if settings.memory_limit_gb else ""


def train_failure(outcome: TrainOutcome, settings: HarnessSettings) -> Ending | None:
    """The ending of a train phase that failed, or None when its weights can be scored."""
    error = outcome.error
    detail = error.get("traceback") or error.get("message") or ""
    if outcome.cancelled:
        return "crash", "cancelled", "the experiment was cancelled while training"
    if outcome.diverged_loss is not None or error.get("kind") == "diverged":
        loss = outcome.diverged_loss
        return (
            "crash",
            "nan_loss",
            f"training diverged: loss {loss if loss is not None else 'NaN'} (NaN, infinite or > 100); "
            "stopped at once",
        )
    if outcome.oom_killed:  # the kernel killed a process at the sandbox's memory limit
        return (
            "crash",
            "out_of_memory",
            f"out of memory{memory_limit(settings)}: a sandbox process was killed",
        )
    if outcome.timed_out:
        return (
            "timeout",
            "timeout",
            f"killed at the hard deadline, {outcome.deadline_after:.1f} s after start (startup, at most "
            f"the allowance of {outcome.allowance:g} s, + budget {settings.time_budget:g} s + "
            "grace); train() must return once ctx.time_left() <= 0",
        )
    if error.get("kind") == "oom":
        return (
            "crash",
            "out_of_memory",
            f"out of memory{memory_limit(settings)} while training\n{detail}".rstrip(),
        )
    if error.get("kind") == "disk":
        return (
            "crash",
            "out_of_disk",
            f"out of disk: /sandbox/work holds at most {settings.work_disk_gb:g} GB (preset "
            f"{settings.preset}) and one file at most {FILE_SIZE_LIMIT >> 30} GiB; write less, or "
            f"keep it in memory\n{detail}".rstrip(),
        )
    if error:
        where = error.get("where", "")
        error_class = ERROR_CLASS_BY_WHERE.get(where, "train_error")
        if where == "import" and error.get("message", "").split(":", 1)[0] in IMPORT_ERRORS:
            error_class = "import_error"
        return "crash", error_class, f"{WHERE_TEXT.get(where, 'training failed')}:\n{detail}".rstrip()
    code = outcome.returncode
    if code is not None and (code < 0 or code > 128):
        number = -code if code < 0 else code - 128  # bwrap reports a signal as 128 + number
        return "crash", "killed", f"the train process was killed by {signal_name(number)}"
    if code != 0:
        return "crash", "train_error", f"the train process exited with status {code} without an error report"
    if not outcome.saved:
        return "crash", "train_error", "the train process exited before the weights were saved"
    return None


def over_budget(outcome: TrainOutcome, settings: HarnessSettings) -> Ending | None:
    budget, floor = settings.time_budget, settings.overrun_floor_s
    if not timing.is_over_budget(outcome.training_seconds, budget, floor):
        return None
    return (
        "over_budget",
        "over_budget",
        f"trained {outcome.training_seconds:.1f} s, more than the budget of {budget:g} s + "
        f"{timing.over_budget_tolerance(budget, floor):g} s tolerance; "
        "train() must return once ctx.time_left() <= 0",
    )
