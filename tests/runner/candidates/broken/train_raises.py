# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Broken: train raises after a few steps."""


def train(model, ctx):
    ctx.log(step=0, loss=5.0)
    raise RuntimeError("shape mismatch in the attention block")
