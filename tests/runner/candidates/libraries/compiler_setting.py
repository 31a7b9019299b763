# Appended to good_bigram.py by tests/runner/candidates.py.
"""Honest: sets one of torch's compiler settings when imported, which loads the compiler."""

import torch._dynamo

torch._dynamo.config.cache_size_limit = 64
