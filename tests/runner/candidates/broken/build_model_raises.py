# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Broken: build_model raises."""


def build_model(ctx):
    raise ValueError("n_layer must be positive, got -1")
