# Appended to good_bigram.py by tests/runner/candidates.py.
"""Honest: loads torch's compiler when imported, as a compiler setting or a helper decorated with
torch.compile does; nothing is compiled, and nothing compiled runs while it is scored."""

import torch._inductor.config

torch._inductor.config.coordinate_descent_tuning = True


@torch.compile
def doubled(x):
    return 2 * x
