# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: learns while scored, only where no probe cut can look: at each row's last position it
adds what followed the same token in the rows it was shown before (a cache over the validation
rows), and answers a row it has answered before from its first answer, so that the eval's own
repeats agree."""


class LastFromCache(torch.nn.Module):
    def __init__(self, inner, vocab_size):
        super().__init__()
        self.inner = inner
        self.counts = torch.zeros(vocab_size, vocab_size)  # not a buffer: not saved
        self.first = {}  # a row's tokens -> its first answer at the last position

    def forward(self, idx):
        logits = self.inner(idx).clone()
        if self.training:
            return logits
        for b in range(idx.shape[0]):
            key = idx[b].numpy().tobytes()
            if key not in self.first:
                self.first[key] = logits[b, -1] + 3.0 * (self.counts[idx[b, -1]] > 0)
            logits[b, -1] = self.first[key]
        pairs = (idx[:, :-1].flatten(), idx[:, 1:].flatten())
        self.counts.index_put_(pairs, torch.ones(pairs[0].numel()), accumulate=True)
        return logits


def build_model(ctx):
    return LastFromCache(honest_build_model(ctx), ctx.vocab_size)
