"""Cheap candidate train.py files for worker tests: a bigram model trained for half the budget.

Half, so that a busy test machine (slow first steps) does not push a run over the budget: these
tests are about the worker, not about how much a model learns. For the same reason the bigram
idles between its steps, nine times as long as each step took: a run lasts as long as before (the
tests that act while a run trains need that), and the shared test machine's cores go to the other
tests instead of to steps nobody reads.

Variants differ only in their learning rate, like an agent tuning a constant, so each is a
distinct experiment that the server runs (identical candidates would be deduplicated).
"""

from __future__ import annotations

TEMPLATE = '''"""A bigram model trained with Adam {how}."""

{imports}import torch
from torch import nn

LEARNING_RATE = {lr!r}


def build_model(ctx):
    torch.manual_seed(ctx.seed)
    return nn.Embedding(ctx.vocab_size, ctx.vocab_size).to(ctx.device)


def step_on(model, optimizer, batches):
    inputs, targets = next(batches)
    loss = nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


def train(model, ctx):
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    batches = ctx.loader(8)
{loop}'''

# Train for half the budget, idle nine times each step's time (never past the half).
_PACED = """    step = 0
    while ctx.time_left() > ctx.time_budget / 2:
        started = time.perf_counter()
        ctx.log(step=step, loss=step_on(model, optimizer, batches))
        step += 1
        idle = 9 * (time.perf_counter() - started)
        time.sleep(max(0.0, min(idle, ctx.time_left() - ctx.time_budget / 2)))
"""

# Train for a fixed number of steps whatever the clock says (while the budget lasts).
_FIXED = """    for step in range({steps}):
        if ctx.time_left() < 2:
            break
        ctx.log(step=step, loss=step_on(model, optimizer, batches))
"""


def bigram(lr: float) -> str:
    how = "for half the budget, idle nine tenths of that time"
    return TEMPLATE.format(how=how, imports="import time\n\n", lr=lr, loop=_PACED)


def bigram_fixed_steps(lr: float, steps: int, seed_expression: str = "ctx.seed") -> str:
    """The bigram trained for `steps` steps without idling, so that its score depends on its seed
    and not on how busy the machine is; `seed_expression` is what it seeds torch with."""
    source = TEMPLATE.format(how=f"for {steps} steps", imports="", lr=lr, loop=_FIXED.format(steps=steps))
    return source.replace("torch.manual_seed(ctx.seed)", f"torch.manual_seed({seed_expression})")
