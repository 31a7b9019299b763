# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: carries evaluation rows in its source (HOSTILE_ARGS["rows"], as an offline copy of the
pipeline would give them) and looks them up causally: wherever the last CONTEXT tokens are those
of a carried row, it bets on the token that followed there. A causal, deterministic model: only
not knowing which text is scored stops it."""

CONTEXT = 4


class Carried(torch.nn.Module):
    def __init__(self, inner, rows):
        super().__init__()
        self.inner = inner
        self.follows = {}
        for row in rows:
            for end in range(CONTEXT, len(row)):
                self.follows[tuple(row[end - CONTEXT : end])] = row[end]

    def forward(self, idx):
        logits = self.inner(idx)
        if self.training:
            return logits
        logits = logits.clone()
        tokens = idx.tolist()
        for b, row in enumerate(tokens):
            for t in range(CONTEXT - 1, len(row)):
                known = self.follows.get(tuple(row[t - CONTEXT + 1 : t + 1]))
                if known is not None:
                    logits[b, t, known] += 30.0
        return logits


def build_model(ctx):
    return Carried(honest_build_model(ctx), HOSTILE_ARGS["rows"])
