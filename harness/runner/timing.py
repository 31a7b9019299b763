"""Time accounting for one experiment, done by the harness from its own clock.

The train process's life is measured by the parent (spawn to exit). Startup (interpreter, imports,
data loader, `build_model`, compilation, the first step) is not training time, up to the preset's
`compile_allowance`; the end of startup is the first `ctx.log` call the parent receives. The
candidate can only choose when that first call comes, so the most it can gain is the allowance,
the same for every candidate. Everything after it, including saving the weights, is training.
"""

from __future__ import annotations

# Training may overrun the budget by one last step and the weight save; beyond this it is over
# budget and can never be kept.
OVER_BUDGET_TOLERANCE_MIN_S = 2.0
OVER_BUDGET_TOLERANCE_FRACTION = 0.02
# Between the over-budget line and the hard kill: time to notice the budget is up and exit.
DEADLINE_GRACE_MIN_S = 5.0
DEADLINE_GRACE_FRACTION = 0.05
# Scoring (model rebuild, weight load, all forward passes, the probe) gets this much wall time. It
# only stops a stuck or stalling model: on the cpu preset with the baseline model, on 2 busy
# cores, the forward passes alone take about 100 s.
SCORE_TIMEOUT_MIN_S = 300.0


def startup_credit(first_step_after: float | None, lifetime: float, allowance: float) -> float:
    """Seconds of the train process's `lifetime` that are startup, not training.

    `first_step_after` is when the first progress report arrived, in seconds after spawn (None
    when none arrived); without one the whole life so far counts as startup, up to the allowance.
    """
    until = lifetime if first_step_after is None else min(first_step_after, lifetime)
    return min(max(until, 0.0), allowance)


def training_seconds(first_step_after: float | None, lifetime: float, allowance: float) -> float:
    """Training time of a train process that lived `lifetime` seconds."""
    return max(0.0, lifetime - startup_credit(first_step_after, lifetime, allowance))


def over_budget_tolerance(budget: float) -> float:
    return max(OVER_BUDGET_TOLERANCE_MIN_S, OVER_BUDGET_TOLERANCE_FRACTION * budget)


def is_over_budget(trained: float, budget: float) -> bool:
    return trained > budget + over_budget_tolerance(budget)


def train_deadline(budget: float, allowance: float) -> float:
    """Seconds after spawn at which the train process is killed (status `timeout`)."""
    grace = max(DEADLINE_GRACE_MIN_S, DEADLINE_GRACE_FRACTION * budget)
    return allowance + budget + over_budget_tolerance(budget) + grace


def score_timeout(budget: float, allowance: float) -> float:
    """Wall seconds for the whole score phase: model rebuild, weight load and all forward passes."""
    return max(SCORE_TIMEOUT_MIN_S, 2 * budget) + allowance
