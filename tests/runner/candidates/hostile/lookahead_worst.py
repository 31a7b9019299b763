# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: reads the next input token only at the HOSTILE_ARGS["share"] of each batch's positions
where its own loss on that token is highest (where a lookahead pays most), and there puts a large
logit on it; everywhere else it is the honest model."""


class LookAheadWorst(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, idx):
        logits = self.inner(idx)
        if self.training:
            return logits
        logits = logits.clone()
        ahead = idx[:, 1:]
        own_loss = -torch.log_softmax(logits[:, :-1].double(), dim=-1).gather(2, ahead[..., None])[..., 0]
        cheat = own_loss >= torch.quantile(own_loss.flatten(), 1.0 - HOSTILE_ARGS["share"])
        rows, positions = torch.nonzero(cheat, as_tuple=True)
        logits[rows, positions, ahead[rows, positions]] += 30.0
        return logits


def build_model(ctx):
    return LookAheadWorst(honest_build_model(ctx))
