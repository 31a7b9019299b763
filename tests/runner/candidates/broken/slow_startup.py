# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Honest but slow to start: a long import, then one quick step (no optimizer to import)."""

import time

time.sleep(HOSTILE_ARGS["startup_s"])


def train(model, ctx):
    ctx.log(step=0, loss=5.0)
