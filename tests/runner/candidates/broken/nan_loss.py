# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Broken: the loss becomes NaN at once (fails fast, long before the budget ends)."""

import contextlib
import time


def train(model, ctx):
    ctx.log(step=0, loss=5.0)
    # Swallowing the harness's exception does not help: the harness stops the run itself.
    with contextlib.suppress(FloatingPointError):
        ctx.log(step=1, loss=float("nan"))
    time.sleep(600)
