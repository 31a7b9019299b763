# ruff: noqa: F821
# Appended to good_bigram.py and hostile/carried_rows.py by tests/runner/candidates.py.
"""Hostile: trains a fixed number of steps in its first forward pass while scored. Deterministic,
so a fresh process that does the same agrees with it: only the time it takes can give it away."""


class FirstForwardTrainer(Carrier):
    scored_once = False

    def forward(self, idx):
        if not self.training and not self.scored_once:
            self.scored_once = True
            train_on_carried(self, HOSTILE_ARGS["steps"])
        return super().forward(idx)


def build_model(ctx):
    return carrier(ctx, FirstForwardTrainer)
