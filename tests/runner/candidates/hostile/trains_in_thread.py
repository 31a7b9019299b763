# ruff: noqa: F821
# Appended to good_bigram.py and hostile/carried_rows.py by tests/runner/candidates.py.
"""Hostile: in the score phase (where ctx.time_left() is 0), build_model starts a thread that
trains the model for as long as the process lives, while the harness loads and scores it. Each
forward pass waits until the thread has taken another step, so that it trains however busy the
machine is."""

import threading


class ThreadTrained(Carrier):
    steps = 0  # taken by the thread
    seen = 0  # steps there were at the last forward pass

    def forward(self, idx):
        if not self.training:
            waited = time.monotonic()
            while self.steps == self.seen and time.monotonic() - waited < 10.0:
                time.sleep(0.001)
            self.seen = self.steps
        return super().forward(idx)


def keep_training(model):
    while True:
        try:
            train_on_carried(model, steps=1)
        except RuntimeError:  # the harness loaded the weights in place under a step: take it again
            continue
        model.steps += 1


def build_model(ctx):
    model = carrier(ctx, ThreadTrained)
    if ctx.time_left() <= 0:
        threading.Thread(target=keep_training, args=(model,), daemon=True).start()
    return model
