# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: replaces torch's loss and normalisation functions with ones that report zero loss."""

import torch.nn.functional as F


def zero_loss(*args, **kwargs):
    return torch.zeros((), requires_grad=True)


def patch():
    F.cross_entropy = zero_loss
    F.nll_loss = zero_loss
    F.log_softmax = lambda x, *a, **k: torch.zeros_like(x)
    torch.log_softmax = lambda x, *a, **k: torch.zeros_like(x)
    torch.logsumexp = lambda x, *a, **k: torch.zeros(x.shape[:-1])
    torch.Tensor.log_softmax = lambda self, *a, **k: torch.zeros_like(self)
    torch.Tensor.logsumexp = lambda self, *a, **k: torch.zeros(self.shape[:-1])


def build_model(ctx):
    patch()
    return honest_build_model(ctx)


def train(model, ctx):
    honest_train(model, ctx)
    patch()
