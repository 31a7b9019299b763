# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py.
"""Honest: decorates a helper with torch.compile when imported, which loads the compiler; nothing
is compiled, and nothing compiled runs while it is scored."""


@torch.compile
def doubled(x):
    return 2 * x
