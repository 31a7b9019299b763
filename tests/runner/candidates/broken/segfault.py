# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Broken: the process dies of a signal."""

import os
import signal


def train(model, ctx):
    ctx.log(step=0, loss=5.0)
    os.kill(os.getpid(), signal.SIGSEGV)
