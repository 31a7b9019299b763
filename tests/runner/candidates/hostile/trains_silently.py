# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: trains on real batches for `train_s` seconds by its own clock and never calls
ctx.log, hoping the silent time counts as startup. Prints when it first asked for data and when
it finished, so the test can check that all of it was counted."""

import time


def train(model, ctx):
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    batches = ctx.loader(BATCH_SIZE)
    first_data_at = time.monotonic()
    while time.monotonic() - first_data_at < HOSTILE_ARGS["train_s"]:
        inputs, targets = next(batches)
        loss = nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    print(f"TRAINED FOR {time.monotonic() - first_data_at:.3f} s", flush=True)
