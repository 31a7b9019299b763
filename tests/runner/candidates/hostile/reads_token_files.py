# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: looks for the prepared token files (at their host path, where the sandbox used to
mount them, and anywhere it can see a file of that name) to train on them before its clock
starts (in train(), before its first batch); trains honestly if it finds none. The search is not
in build_model, which the score sandboxes run too: walking the whole tree there would cost the
score phase's startup allowance and make the run invalid for a reason this test is not about."""

import os

NAMES = ("tokens.bin", "docs.npy", "meta.json")


def find_token_files():
    found = []
    for path in [*HOSTILE_ARGS["paths"], *(f"/sandbox/data/train/{name}" for name in NAMES)]:
        try:
            with open(path, "rb") as handle:
                handle.read(16)
            found.append(path)
        except OSError:
            print("HIDDEN", path)
    for root, dirs, names in os.walk("/"):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in ("/proc", "/sys", "/dev")]
        found += [os.path.join(root, name) for name in names if name in NAMES and "train" in root]
    return found


def train(model, ctx):
    found = find_token_files()
    print("FOUND" if found else "NO TOKEN FILES", found, flush=True)
    if found:
        import numpy as np

        tokens = np.fromfile(next(path for path in found if path.endswith("tokens.bin")), dtype=np.uint16)
        optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
        rows = torch.from_numpy(tokens[: len(tokens) // 65 * 65].astype("int64")).view(-1, 65)
        for first in range(0, len(rows), BATCH_SIZE):
            batch = rows[first : first + BATCH_SIZE]
            loss = nn.functional.cross_entropy(model(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    honest_train(model, ctx)
