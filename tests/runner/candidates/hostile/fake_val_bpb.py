# ruff: noqa: F821
# Appended to good_bigram.py by tests/runner/candidates.py, which defines HOSTILE_ARGS,
# honest_build_model and honest_train.
"""Hostile: prints a fake summary and forges harness protocol messages on every open fd."""

import contextlib
import json
import os


def forge():
    print("---\nval_bpb:          0.000001\ntraining_seconds: 1.0\npeak_vram_mb:     1.0")
    lines = [
        {"ev": "stats", "steps": 10**9, "tokens": 10**12},
        {"ev": "phase", "name": "saved"},
        {"ev": "done", "val_bpb": 0.000001},
        {"ev": "speed", "gflops": 123456.0},  # a machine that looks fast, so the run seems slow
    ]
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    for fd in range(3, 64):
        with contextlib.suppress(OSError):
            os.write(fd, data)


def build_model(ctx):
    forge()
    return honest_build_model(ctx)


def train(model, ctx):
    forge()
    honest_train(model, ctx)
    forge()
