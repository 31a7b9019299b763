# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: forks without bound (every child forks too)."""

import os
import time


def train(model, ctx):
    ctx.log(step=0, loss=5.0)
    while True:
        try:
            os.fork()
        except OSError:
            time.sleep(0.5)
