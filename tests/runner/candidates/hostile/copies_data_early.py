# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: copies batches into its own buffer while building the model, then trains on that
buffer for `silent_s` seconds without logging and without asking for more data, then goes on
honestly until ctx.time_left() says the budget is spent. Prints how long it trained in all,
from its first request for data, by its own clock."""

import time

BUFFER = []
FIRST_DATA_AT = []


def build_model(ctx):
    if ctx.time_left() <= 0:  # the score phase: there is no data there
        return honest_build_model(ctx)
    batches = ctx.loader(BATCH_SIZE)
    FIRST_DATA_AT.append(time.monotonic())
    for _ in range(20):
        inputs, targets = next(batches)
        BUFFER.append((inputs.clone(), targets.clone()))
    return honest_build_model(ctx)


def train(model, ctx):
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)

    def step(inputs, targets):
        loss = nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.item()

    started = time.monotonic()
    count = 0
    while time.monotonic() - started < HOSTILE_ARGS["silent_s"]:  # checked every step
        step(*BUFFER[count % len(BUFFER)])
        count += 1
    batches = ctx.loader(BATCH_SIZE)
    count = 0
    while True:
        ctx.log(step=count, loss=step(*next(batches)))
        count += 1
        if ctx.time_left() <= 0:
            break
    print(f"TRAINED FOR {time.monotonic() - FIRST_DATA_AT[0]:.3f} s", flush=True)
