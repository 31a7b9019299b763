# ruff: noqa: F821
# Appended to good_bigram.py and hostile/clipped_mix.py by tests/runner/candidates.py.
"""Hostile: a copy of its output table (the bigram model's head) takes a gradient step on every
batch it is scored on, and is mixed in, clipped under the tolerance."""


class OnlineHead(Mixer):
    def __init__(self, inner):
        super().__init__(inner)
        self.head = None  # a plain tensor, not saved with the weights

    def other(self, idx, logits):
        if self.head is None:
            self.head = self.inner.table.weight.detach().clone()
        return torch.log_softmax(self.head[idx].double(), dim=-1)

    def learn(self, idx):
        head = self.head.clone().requires_grad_(True)
        with torch.enable_grad():
            next_token_loss(head[idx], idx).backward()
        self.head = (head - HOSTILE_ARGS["lr"] * head.grad).detach()


def build_model(ctx):
    return OnlineHead(honest_build_model(ctx))
