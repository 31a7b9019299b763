# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: at evaluation, puts a large logit on the next input token (reads the future)."""


class LookAhead(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, idx):
        logits = self.inner(idx)
        if not self.training:
            peek = torch.nn.functional.one_hot(idx[:, 1:], logits.shape[-1]).float() * 30.0
            logits = logits.clone()
            logits[:, :-1] += peek
        return logits


def build_model(ctx):
    return LookAhead(honest_build_model(ctx))
