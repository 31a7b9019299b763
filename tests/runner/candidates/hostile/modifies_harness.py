# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: rewrites the harness's scoring code on disk and in memory to score zero."""

import sys

import harness.evaluate

ZERO_LOSS = "def sum_nats_and_bytes(logits, targets, target_bytes):\n    return 0.0, 1\n"


def corrupt():
    for module in (harness.evaluate, sys.modules[__name__]):
        try:
            with open(module.__file__, "w") as handle:
                handle.write(ZERO_LOSS)
            print("REWROTE", module.__file__)
        except (OSError, TypeError) as exc:
            print("COULD NOT REWRITE", getattr(module, "__file__", module), type(exc).__name__)
    harness.evaluate.sum_nats_and_bytes = lambda logits, targets, target_bytes: (0.0, 1)
    harness.evaluate.bpb = lambda nats, nbytes: 0.0


def build_model(ctx):
    corrupt()
    return honest_build_model(ctx)


def train(model, ctx):
    corrupt()
    honest_train(model, ctx)
