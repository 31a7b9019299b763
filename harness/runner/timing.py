"""Time accounting for one experiment, done by the harness from its own clock.

The clock starts at `go`, once the train sandbox has started its interpreter and imported torch,
and stops when the train process exits. Startup (importing train.py, `build_model`, compiling
on dummy inputs) is not training time, up to the preset's `compile_allowance`. Startup ends at
the first of: the feeder receiving the first request for training data, the runner receiving
the first `ctx.log`. Training data reaches the sandbox only through that feeder, so a candidate
cannot train on the corpus before its clock runs; what it can do before, with no data, is worth
at most the allowance, the same for every candidate (docs/runner.md says what that leaves).
Everything after, including saving the weights, is training.
"""

from __future__ import annotations

# Training may overrun the budget by one last step and the weight save; beyond this it is over
# budget and can never be kept. 2 % of the budget on every preset that ranks changes (h100, cpu,
# gpu-check): at most 2 % more training. Below the preset's floor (HarnessSettings.overrun_floor_s)
# only on short budgets, where an honest run's last step, save and exit on a loaded machine are
# more than 2 % (docs/runner.md, "What is left to an attacker", has the measurements).
OVER_BUDGET_TOLERANCE_FRACTION = 0.02
# Between the over-budget line and the hard kill: time to notice the budget is up and exit.
DEADLINE_GRACE_MIN_S = 5.0
DEADLINE_GRACE_FRACTION = 0.05
# Scoring (model rebuild, weight load, all forward passes, the probe) gets this much wall time. It
# only stops a stuck or stalling model, so it is far above an honest score phase on a busy machine
# (docs/benchmarks.md, "Score phase"); the bound per model process is score_budget's.
SCORE_TIMEOUT_MIN_S = 300.0


def startup_credit(started_after: float | None, lifetime: float, allowance: float) -> float:
    """Seconds of the train process's `lifetime` that are startup, not training.

    `started_after` is when startup ended (the first data request or progress report), in seconds
    after `go` (None while it has not); until then the whole life so far counts as startup, up to
    the allowance.
    """
    until = lifetime if started_after is None else min(started_after, lifetime)
    return min(max(until, 0.0), allowance)


def training_seconds(started_after: float | None, lifetime: float, allowance: float) -> float:
    """Training time of a train process that lived `lifetime` seconds."""
    return max(0.0, lifetime - startup_credit(started_after, lifetime, allowance))


def over_budget_tolerance(budget: float, floor: float) -> float:
    """Seconds of training past `budget` still within it; `floor` is the preset's overrun_floor_s."""
    return max(floor, OVER_BUDGET_TOLERANCE_FRACTION * budget)


def is_over_budget(trained: float, budget: float, floor: float) -> bool:
    return trained > budget + over_budget_tolerance(budget, floor)


def train_deadline(budget: float, startup: float, floor: float) -> float:
    """Seconds after `go` at which the train process is killed (status `timeout`), given its credited
    startup (startup_credit; the whole allowance while startup has not ended)."""
    grace = max(DEADLINE_GRACE_MIN_S, DEADLINE_GRACE_FRACTION * budget)
    return startup + budget + over_budget_tolerance(budget, floor) + grace


def score_timeout(budget: float, allowance: float) -> float:
    """Wall seconds for the whole score phase: model rebuild, weight load and all forward passes."""
    return max(SCORE_TIMEOUT_MIN_S, 2 * budget) + allowance
