# ruff: noqa: F821
# Appended to good_bigram.py and hostile/clipped_mix.py by tests/runner/candidates.py.
"""Hostile: a bias over the vocabulary, learned by a gradient step on every batch it is scored
on (the unigram statistics of the validation text), mixed in and clipped under the tolerance."""


class OnlineBias(Mixer):
    def __init__(self, inner, vocab_size):
        super().__init__(inner)
        self.bias = torch.zeros(vocab_size)

    def other(self, idx, logits):
        return torch.log_softmax((logits + self.bias).double(), dim=-1)

    def learn(self, idx):
        bias = self.bias.clone().requires_grad_(True)
        with torch.enable_grad():
            next_token_loss(self.inner(idx).detach() + bias, idx).backward()
        self.bias = (bias - HOSTILE_ARGS["lr"] * bias.grad).detach()


def build_model(ctx):
    return OnlineBias(honest_build_model(ctx), ctx.vocab_size)
