# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Slow to start: the first ctx.log comes only once the training clock shows the whole budget
used and `over_s` more, so the run is over budget however fast or slow the machine is."""

import time


def train(model, ctx):
    while ctx.time_left() > -HOSTILE_ARGS["over_s"]:
        time.sleep(0.05)
    ctx.log(step=0, loss=5.0)
