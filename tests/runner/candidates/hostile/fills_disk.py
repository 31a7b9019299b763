# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: fills its work folder (the host's disk, were it a host folder) with many files, then
trains honestly; it stops writing only when a write fails, and does not catch that failure."""

import os

CHUNK = b"x" * (1 << 20)


def train(model, ctx):
    for i in range(HOSTILE_ARGS["megabytes"]):
        with open(os.path.join(os.getcwd(), f"fill-{i // 64}-{i % 64}.bin"), "wb") as handle:
            handle.write(CHUNK)
    print("WROTE", HOSTILE_ARGS["megabytes"], "MiB")
    honest_train(model, ctx)
