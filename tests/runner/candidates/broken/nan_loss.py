# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Broken: the loss becomes NaN at once (fails fast, long before the budget ends)."""

import time


def train(model, ctx):
    ctx.log(step=0, loss=5.0)
    try:
        ctx.log(step=1, loss=float("nan"))
    except FloatingPointError:
        pass  # swallowing the harness's exception does not help: the harness stops the run
    time.sleep(600)
