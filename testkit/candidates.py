"""Cheap candidate train.py files for worker tests: a bigram model trained for half the budget.

Half, so that a busy test machine (slow first steps) does not push a run over the budget: these
tests are about the worker, not about how much a model learns.

Variants differ only in their learning rate, like an agent tuning a constant, so each is a
distinct experiment that the server runs (identical candidates would be deduplicated).
"""

from __future__ import annotations

TEMPLATE = '''"""A bigram model trained with Adam for half the budget."""

import torch
from torch import nn

LEARNING_RATE = {lr!r}


def build_model(ctx):
    torch.manual_seed(ctx.seed)
    return nn.Embedding(ctx.vocab_size, ctx.vocab_size).to(ctx.device)


def train(model, ctx):
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    batches = ctx.loader(8)
    step = 0
    while ctx.time_left() > ctx.time_budget / 2:
        inputs, targets = next(batches)
        loss = nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        ctx.log(step=step, loss=loss.item())
        step += 1
'''


def bigram(lr: float) -> str:
    return TEMPLATE.format(lr=lr)


def bigram_fixed_steps(lr: float, steps: int, seed_expression: str = "ctx.seed") -> str:
    """The bigram trained for `steps` steps whatever the clock says (while the budget lasts), so
    that its score depends on its seed and not on how busy the machine is; `seed_expression` is
    what it seeds torch with."""
    loop = f"""    for step in range({steps}):
        if ctx.time_left() < 2:
            break
"""
    source = TEMPLATE.format(lr=lr).replace("for half the budget", f"for {steps} steps")
    source = source.replace("torch.manual_seed(ctx.seed)", f"torch.manual_seed({seed_expression})")
    source = source.replace("    step = 0\n    while ctx.time_left() > ctx.time_budget / 2:\n", loop)
    return source.replace("        step += 1\n", "")
