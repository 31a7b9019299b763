# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: looks for the validation data, the data manifest, the repo and secrets, and cheats if found."""

import os
import sys

# Bound the same in every sandbox: walked in the train sandbox; the score sandboxes skip them, as
# their walk counts against the score phase's time bound.
SHARED_TREES = ("/usr", sys.base_prefix, sys.prefix)


def snoop(scoring):
    found = []
    for path in HOSTILE_ARGS["paths"]:
        try:
            with open(path, "rb") as handle:
                handle.read(16)
            found.append(path)
            print("VISIBLE", path)
        except OSError as exc:
            print("HIDDEN", path, type(exc).__name__)
    for root, dirs, names in os.walk("/"):
        skipped = ("/proc", "/sys", "/dev", *(SHARED_TREES if scoring else ()))
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in skipped]
        for name in names:
            if name in ("targets.npy", "target_bytes.npy"):
                found.append(os.path.join(root, name))
                print("VISIBLE", os.path.join(root, name))
    secrets = [key for key, value in os.environ.items() if value == HOSTILE_ARGS["secret"]]
    print("ENV", sorted(os.environ), "SECRETS", secrets)
    return found


class TargetLookup(torch.nn.Module):
    """Answers every validation row with its true next tokens: val_bpb near 0 if it could see them."""

    def __init__(self, inputs, targets, vocab_size):
        super().__init__()
        self.rows = {
            tuple(row): target for row, target in zip(inputs.tolist(), targets.tolist(), strict=False)
        }
        self.vocab_size = vocab_size
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, idx):
        logits = torch.zeros(idx.shape[0], idx.shape[1], self.vocab_size)
        for b, row in enumerate(idx.tolist()):
            for t, token in enumerate(self.rows.get(tuple(row), [])):
                logits[b, t, token] = 50.0
        return logits


def build_model(ctx):
    found = snoop(scoring=ctx.time_left() <= 0)
    targets = [path for path in found if path.endswith("targets.npy")]
    if targets:
        import numpy as np

        folder = os.path.dirname(targets[0])
        inputs = np.load(os.path.join(folder, "inputs.npy"))
        return TargetLookup(inputs, np.load(targets[0]), ctx.vocab_size)
    return honest_build_model(ctx)
