# ruff: noqa: F821
# Appended to good_bigram.py and hostile/carried_rows.py by tests/runner/candidates.py.
"""Hostile: in the score phase (where ctx.time_left() is 0), build_model starts a thread that
trains the model for as long as the process lives, while the harness loads and scores it."""

import threading


def keep_training(model):
    while True:
        try:
            train_on_carried(model, None, 3600.0)
        except RuntimeError:  # the harness loaded the weights in place under a step: start it again
            continue


def build_model(ctx):
    model = carrier(ctx)
    if ctx.time_left() <= 0:
        threading.Thread(target=keep_training, args=(model,), daemon=True).start()
    return model
