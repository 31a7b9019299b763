"""An honest candidate: a bigram model trained with Adam until the budget is spent."""

import time

import torch
from torch import nn

BATCH_SIZE = 8
LEARNING_RATE = 0.05


class Bigram(nn.Module):
    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.table = nn.Embedding(vocab_size, vocab_size)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.table(idx)


def build_model(ctx):
    torch.manual_seed(ctx.seed)
    return Bigram(ctx.vocab_size).to(ctx.device)


def train(model, ctx):
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    batches = ctx.loader(BATCH_SIZE)
    step = 0
    started = time.monotonic()
    while True:  # at least one step, however little time is left
        inputs, targets = next(batches)
        logits = model(inputs)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        tokens_per_s = (step + 1) * inputs.numel() / max(time.monotonic() - started, 1e-9)
        ctx.log(step=step, loss=loss.item(), tokens_per_s=tokens_per_s)
        step += 1
        if ctx.time_left() <= 0:
            break
