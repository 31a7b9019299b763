"""Cheap candidate train.py files for worker tests: a bigram model whose run trains for half the
budget, taking steps for at most its first second and waiting out the rest.

Half, so that a busy test machine (slow first steps) does not push a run over the budget: these
tests are about the worker, not about how much a model learns. At most a second of steps, because
the tests that act while a run trains ask for budgets of 10 to 60 s, and steps all that time would
only take the CPU from the rest of the suite; the wait keeps the run as long as before.

Variants differ only in their learning rate, like an agent tuning a constant, so each is a
distinct experiment that the server runs (identical candidates would be deduplicated).
"""

from __future__ import annotations

TEMPLATE = '''"""A bigram model trained with Adam {how_long}."""
{imports}
import torch
from torch import nn

LEARNING_RATE = {lr!r}


def build_model(ctx):
    torch.manual_seed({seed_expression})
    return nn.Embedding(ctx.vocab_size, ctx.vocab_size).to(ctx.device)


def train(model, ctx):
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    batches = ctx.loader(8)
{loop}        inputs, targets = next(batches)
        loss = nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        ctx.log(step=step, loss=loss.item())
'''

TIMED_LOOP = """    started = time.monotonic()
    for step in itertools.count():
        # Its second of steps is over (a literal, not a constant: the learning rate stays the one
        # constant that agents tune): wait out the half budget.
        while ctx.time_left() > ctx.time_budget / 2 and time.monotonic() - started > 1.0:
            time.sleep(0.05)
        if ctx.time_left() <= ctx.time_budget / 2:
            break
"""


def bigram(lr: float) -> str:
    return TEMPLATE.format(
        how_long="for half the budget (steps for at most a second of it)",
        imports="\nimport itertools\nimport time\n",
        lr=lr,
        seed_expression="ctx.seed",
        loop=TIMED_LOOP,
    )


def bigram_fixed_steps(lr: float, steps: int, seed_expression: str = "ctx.seed") -> str:
    """The bigram trained for `steps` steps whatever the clock says (while the budget lasts), so
    that its score depends on its seed and not on how busy the machine is; `seed_expression` is
    what it seeds torch with."""
    loop = f"""    for step in range({steps}):
        if ctx.time_left() < 2:
            break
"""
    return TEMPLATE.format(
        how_long=f"for {steps} steps", imports="", lr=lr, seed_expression=seed_expression, loop=loop
    )


WHOLE_BUDGET_LOOP = """    for step in itertools.count():
        if ctx.time_left() < 0.2:
            break
"""


def bigram_whole_budget(lr: float) -> str:
    """The bigram trained for as long as the budget lasts: what it scores depends on how many steps
    the machine takes in that time, as a real train.py's does on a slower GPU."""
    return TEMPLATE.format(
        how_long="for the whole budget",
        imports="\nimport itertools\n",
        lr=lr,
        seed_expression="ctx.seed",
        loop=WHOLE_BUDGET_LOOP,
    )
