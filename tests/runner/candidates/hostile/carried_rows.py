# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Shared by the hostile candidates that train while they are scored: training rows that travel
with the weights. train() keeps a batch of training data in a buffer, so it is saved with the
weights and reaches the score sandboxes, where train_on_carried() trains the bigram table on it.
(Followed by a part that decides where in the score phase the training happens.)"""

CARRIED_ROWS = 64


class Carrier(torch.nn.Module):
    def __init__(self, vocab_size, seq_len):
        super().__init__()
        self.table = torch.nn.Embedding(vocab_size, vocab_size)
        self.register_buffer("carried", torch.zeros(CARRIED_ROWS, seq_len + 1, dtype=torch.long))

    def forward(self, idx):
        return self.table(idx)


def carrier(ctx, kind=Carrier):
    torch.manual_seed(ctx.seed)
    return kind(ctx.vocab_size, ctx.seq_len).to(ctx.device)


def build_model(ctx):
    return carrier(ctx)


def train(model, ctx):
    inputs, targets = next(ctx.loader(CARRIED_ROWS))
    model.carried.copy_(torch.cat([inputs, targets[:, -1:]], dim=1))
    honest_train(model, ctx)


def train_on_carried(model, steps):
    """`steps` gradient steps on the carried rows. (Plain SGD: a torch.optim optimizer would first
    spend seconds importing torch._dynamo.)"""
    weight = model.table.weight
    with torch.enable_grad():
        for _ in range(steps):
            rows = model.carried
            logits = model.table(rows[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten())
            (grad,) = torch.autograd.grad(loss, [weight])
            with torch.no_grad():
                weight -= 10.0 * grad
