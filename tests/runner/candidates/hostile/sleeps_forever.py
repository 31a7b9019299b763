# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: never returns from train()."""

import time


def train(model, ctx):
    ctx.log(step=0, loss=5.0)
    time.sleep(10**6)
