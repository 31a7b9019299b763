# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py.
"""Honest: sets one of torch's compiler settings through torch's own attribute, with no import of
the compiler (torch loads it on first access)."""

torch._dynamo.config.cache_size_limit = 64
