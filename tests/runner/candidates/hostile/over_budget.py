# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: keeps training well past its budget, but inside the hard deadline."""

import time


def train(model, ctx):
    honest_train(model, ctx)
    while ctx.time_left() > -HOSTILE_ARGS["overrun_s"]:
        time.sleep(0.05)
