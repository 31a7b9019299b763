# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: trains on real batches for `silent_s` seconds before its first ctx.log, then goes on
like an honest candidate until ctx.time_left() says the budget is spent. Prints how long it
trained in all, from its first request for data, by its own clock."""

import time


def train(model, ctx):
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    batches = ctx.loader(BATCH_SIZE)
    first_data_at = time.monotonic()
    step = 0
    while True:
        inputs, targets = next(batches)
        loss = nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if time.monotonic() - first_data_at >= HOSTILE_ARGS["silent_s"]:
            ctx.log(step=step, loss=loss.item())
            if ctx.time_left() <= 0:
                break
        step += 1
    print(f"TRAINED FOR {time.monotonic() - first_data_at:.3f} s", flush=True)
