# ruff: noqa: F821
# Appended to good_bigram.py and hostile/clipped_mix.py by tests/runner/candidates.py.
"""Hostile: a cache of bigram counts from the validation rows it has been shown (earlier batches
and the other rows of the batch), mixed in and clipped under the tolerance."""


class NgramCache(Mixer):
    def __init__(self, inner, vocab_size):
        super().__init__(inner)
        self.counts = torch.zeros(vocab_size, vocab_size, dtype=torch.float64)  # not a buffer: not saved

    def other(self, idx, logits):
        vocab = self.counts.shape[0]
        following = torch.nn.functional.one_hot(idx[:, 1:], vocab).double()  # [B, T-1, V]
        # own[b, t]: the bigram counts of token idx[b, t] within its own row, left out below
        own = (idx[:, :, None] == idx[:, None, :-1]).double() @ following
        pairs = (idx[:, :-1].flatten(), idx[:, 1:].flatten())
        shown = self.counts.index_put(
            pairs, torch.ones(pairs[0].numel(), dtype=torch.float64), accumulate=True
        )
        others = shown[idx] - own + 0.01
        self.counts = shown
        return torch.log(others / others.sum(-1, keepdim=True))


def build_model(ctx):
    return NgramCache(honest_build_model(ctx), ctx.vocab_size)
