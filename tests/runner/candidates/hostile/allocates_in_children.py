# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: forks workers that each stay under a per-process limit but together exceed memory."""

import os
import time


def train(model, ctx):
    ctx.log(step=0, loss=5.0)
    for _ in range(HOSTILE_ARGS["children"]):
        if os.fork() == 0:
            hoard = bytearray(HOSTILE_ARGS["child_bytes"])
            for offset in range(0, len(hoard), 4096):
                hoard[offset] = 1
            time.sleep(600)
            os._exit(0)
    time.sleep(600)
