# ruff: noqa: F821
# Appended to good_bigram.py and hostile/clipped_mix.py by tests/runner/candidates.py.
"""Hostile: a low-rank adapter on the logits (down[idx] @ up, rank 8), trained by a gradient step
on every batch it is scored on, mixed in and clipped under the tolerance."""

RANK = 8


class OnlineLoRA(Mixer):
    def __init__(self, inner, vocab_size):
        super().__init__(inner)
        generator = torch.Generator().manual_seed(0)
        self.down = torch.randn(vocab_size, RANK, generator=generator) * 0.1
        self.up = torch.zeros(RANK, vocab_size)

    def other(self, idx, logits):
        return torch.log_softmax((logits + self.down[idx] @ self.up).double(), dim=-1)

    def learn(self, idx):
        down, up = self.down.clone().requires_grad_(True), self.up.clone().requires_grad_(True)
        with torch.enable_grad():
            next_token_loss(self.inner(idx).detach() + down[idx] @ up, idx).backward()
        self.down = (down - HOSTILE_ARGS["lr"] * down.grad).detach()
        self.up = (up - HOSTILE_ARGS["lr"] * up.grad).detach()


def build_model(ctx):
    return OnlineLoRA(honest_build_model(ctx), ctx.vocab_size)
