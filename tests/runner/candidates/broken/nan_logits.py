# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Broken: NaN logits at evaluation."""


class NaNs(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, idx):
        logits = self.inner(idx)
        return logits if self.training else logits * float("nan")


def build_model(ctx):
    return NaNs(honest_build_model(ctx))
