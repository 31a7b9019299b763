# ruff: noqa: F821
# Appended to good_bigram.py and hostile/carried_rows.py by tests/runner/candidates.py.
"""Hostile: a forward pre-hook, registered in build_model, trains a few steps before every
forward pass while scored: a little more trained with every batch."""


def build_model(ctx):
    model = carrier(ctx)

    def keep_training(module, args):
        if not module.training:
            train_on_carried(module, HOSTILE_ARGS["steps"])

    model.register_forward_pre_hook(keep_training)
    return model
