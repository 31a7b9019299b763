# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: allocates memory without bound in train()."""


def train(model, ctx):
    ctx.log(step=0, loss=5.0)
    hoard = []
    while True:
        hoard.append(torch.ones(64 * 1024 * 1024, dtype=torch.uint8))
