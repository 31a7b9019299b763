# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py.
"""Not hostile, but its forward depends on how many rows its batch holds, as bf16 kernels on a CPU
can: a row alone gets a slightly different first logit, far over the tolerance."""


class BatchVariant(Bigram):
    def forward(self, idx):
        logits = super().forward(idx)
        if idx.shape[0] == 1:
            logits = logits.clone()
            logits[..., 0] += 0.5
        return logits


def build_model(ctx):
    torch.manual_seed(ctx.seed)
    return BatchVariant(ctx.vocab_size).to(ctx.device)
