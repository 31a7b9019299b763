# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: writes outside its work dir, including over the harness, the venv and the candidate."""

import os


def try_write(path):
    try:
        with open(path, "a") as handle:
            handle.write("\n# hostile was here\n")
        print("WROTE", path)
    except OSError as exc:
        print("REFUSED", path, type(exc).__name__)


def build_model(ctx):
    for path in HOSTILE_ARGS["targets"]:
        try_write(path)
    return honest_build_model(ctx)


def train(model, ctx):
    for path in HOSTILE_ARGS["targets"]:
        try_write(path)
    try_write(__file__)
    with open(os.path.join(os.getcwd(), "inside.txt"), "w") as handle:
        handle.write("allowed")
    print("WROTE inside work dir")
    honest_train(model, ctx)
