# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: reads the future, but answers any row sharing a prefix with one it saw before from a
cache, to pass a causality probe that shows it the original and then a variant in one process."""


class MemoLookAhead(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.seen = []  # (row tokens, logits)

    def forward(self, idx):
        logits = self.inner(idx).clone()
        if self.training:
            return logits
        peek = torch.nn.functional.one_hot(idx[:, 1:], logits.shape[-1]).float() * 30.0
        logits[:, :-1] += peek
        for b in range(idx.shape[0]):
            row = idx[b]
            for old_row, old_logits in self.seen:
                same = (old_row == row).long().cumprod(0).sum().item()
                if same > 0:
                    logits[b, :same] = old_logits[:same]
            self.seen.append((row.clone(), logits[b].clone()))
        return logits


def build_model(ctx):
    return MemoLookAhead(honest_build_model(ctx))
